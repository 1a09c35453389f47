"""Every routing decision in the same stages: filters -> a scorer -> the picker.

A class's placement (and each slot-counting policy's: ``outcomes.first_free``) is a ``Plan``: stages tried in order (e.g. `latency`: low-latency
first, then, once its queue budget is spent, anywhere), each a list of filters and a
scorer, and what to answer when no stage finds a worker. ``place`` runs a plan; first
placements, waiters re-asked by admission, spills, promoted requests and retries after a
failed first byte all come through here, so they all obey the same caps, ceilings and
reserve.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.routing.filters import Filter
from gateway.routing.picker import TieBreak
from gateway.routing.scorers import Scorer
from gateway.types.decision import Action, Decision
from gateway.types.view import WorkerLoad

FLEET_SCOPE = "fleet"  # ties rotate over the whole fleet


@dataclass(frozen=True, slots=True)
class Stage:
    filters: tuple[Filter, ...]
    scorer: Scorer
    reason: str  # what a route from this stage says (x-gateway-route-reason)
    # The scorer counts the request's own time to first packet (seconds), which a worker
    # that must encode the request's reference first lengthens: voice affinity's cold cost
    # applies (the other stages prefer a worker that holds the codes only among ties).
    own_time: bool = False
    # The tie rotation's scope (a pool: the slot-counting plans rotate within it); None:
    # the one ``place`` is given.
    scope: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    stages: tuple[Stage, ...]
    wait_reason: str  # when no stage found room (a filter may name a more precise one)


def place(
    plan: Plan,
    workers: Sequence[WorkerLoad],
    ties: TieBreak,
    scope: str = FLEET_SCOPE,
    preferred: frozenset[str] = frozenset(),
    encode_s: float = 0.0,
) -> Decision:
    """ROUTE to the first stage's pick that has a candidate, else WAIT. ``preferred``
    (voice affinity: the workers that probably hold the request's encoded reference) only
    decides among the candidates of the stage that routes; ``encode_s`` is what the others
    would spend encoding it first."""
    wait_reason = plan.wait_reason
    for stage in plan.stages:
        candidates = workers
        for stage_filter in stage.filters:
            kept = stage_filter.keep(candidates)
            if len(kept) < len(candidates) and stage_filter.wait_reason is not None and not kept:
                wait_reason = stage_filter.wait_reason
            candidates = kept
            if not candidates:
                break
        else:
            cold_cost = encode_s if stage.own_time else 0.0
            chosen = ties.pick(candidates, stage.scorer(candidates), stage.scope or scope, preferred, cold_cost)
            assert chosen is not None
            return routed(chosen, stage.reason)
    return Decision(Action.WAIT, wait_reason)


def routed(worker: WorkerLoad, reason: str) -> Decision:
    """A route, with the prediction behind it when the worker has a curve."""
    curve, load = worker.curve, worker.load
    if curve is None:
        return Decision(Action.ROUTE, reason, worker.pool, worker.worker_id)
    return Decision(Action.ROUTE, reason, worker.pool, worker.worker_id, curve.ttfp(load + 1), curve.rtf(load + 1))
