"""The routing classes, each declared in one module a reader can change alone: the three
SLA classes a client names (`latency`, `balanced`, `throughput`) and `deadline`, the
later sentences of a voice session.

A class module says, for the `adaptive` policy, where a request of that class goes and
when it waits or spills (its ``plan``), and, for admission, how long it may queue before
the rule changes for it (``spill_after_s``: `latency` may leave low-latency;
``promoted_to``: a long-queued `throughput` request is served as `balanced`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.config import RoutingThresholds
from gateway.routing.stages import Plan
from gateway.types import SlaClass
from gateway.types.view import RequestInfo, WorkerLoad


@dataclass(frozen=True, slots=True)
class Context:
    """What a plan is built from besides the request: the candidates and the knobs."""

    workers: Sequence[WorkerLoad]  # the candidates: routable, with a curve, not tried by this request
    fleet: Sequence[WorkerLoad]  # every routable worker with a curve (a retry's tried ones too)
    thresholds: RoutingThresholds
    latency_reserve: int  # places per low-latency worker kept for `latency` right now


@dataclass(frozen=True, slots=True)
class SlaRules:
    sla: SlaClass
    plan: Callable[[RequestInfo, Context], Plan]
    # Seconds a queued request may wait before it may spill (None: the rule never changes).
    spill_after_s: Callable[[RequestInfo, RoutingThresholds], float | None] = lambda request, thresholds: None
    # Served as this class once queued for ``admission.promote_after_s`` (None: never).
    promoted_to: SlaClass | None = None
