"""The default policy: place each request where its predicted outcome is best for its class.

For every routable worker the view carries a ``Curve`` (its learned performance by load).
Each SLA class declares, in its own module under ``routing.classes``, the stages its
requests go through (filters -> a scorer with float predictions -> the picker): where it
goes, when it waits and when it spills. This module only dispatches to the class, keeps
the memory the policy needs (its tie rotation),
and names a degraded fleet in the reason.

Deterministic: no I/O, no clock; the same calls in the same order give the same answers.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.config import RoutingThresholds
from gateway.routing.classes import Context, SlaRules
from gateway.routing.classes import deadline, pinned
from gateway.routing.classes.registry import CLASSES
from gateway.routing.filters import PREDICTABLE, Untried
from gateway.routing.outcomes import reject
from gateway.routing.picker import TieBreak
from gateway.routing.reserve import latency_reserve
from gateway.routing.stages import FLEET_SCOPE, place
from gateway.types import PoolName, reasons
from gateway.types.decision import Action, Decision
from gateway.types.view import LoadView, RequestInfo, WorkerLoad

LL = PoolName.LOW_LATENCY
HT = PoolName.HIGH_THROUGHPUT

class AdaptivePolicy:
    name = "adaptive"

    def __init__(self) -> None:
        self._ties = TieBreak()

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        fleet = PREDICTABLE.keep(view.workers)
        # A retry's tried workers are out of the candidates, not out of the fleet: the
        # reserve and the degraded reasons still see them.
        workers = Untried(request.tried).keep(fleet)
        if not workers:
            return reject(reasons.NO_WORKERS)
        context = Context(workers, fleet, thresholds, latency_reserve(thresholds, view, fleet))
        rules = _rules(request, fleet)
        decision = place(
            rules.plan(request, context), workers, self._ties, FLEET_SCOPE,
            request.warm_workers if thresholds.voice_affinity else frozenset(), reference_encode_s(request, thresholds),
        )  # fmt: skip
        if decision.action is Action.ROUTE and rules is not pinned.RULES:
            decision = _degraded_reason(decision, fleet)
        return decision


def reference_encode_s(request: RequestInfo, thresholds: RoutingThresholds) -> float:
    """What a worker without the request's reference codes spends encoding its clip first
    (voice affinity's cost of a cold worker): ``voice_affinity_encode_ms_per_second`` of the
    clip's length when the gateway knows it, else ``voice_affinity_bonus_ms``."""
    if request.reference_s is None:
        return thresholds.voice_affinity_bonus_ms / 1000.0
    return thresholds.voice_affinity_encode_ms_per_second * request.reference_s / 1000.0


def _rules(request: RequestInfo, fleet: Sequence[WorkerLoad]) -> SlaRules:
    pin = request.pool_pin
    # The demo's Compare: one pool, whatever the class. A pool with no routable worker (still
    # warming) would hold the request until it timed out: routed by its class instead, with
    # the degraded reason that says why.
    if pin is not None and any(w.pool is pin for w in fleet):
        return pinned.RULES
    if request.deadline_s is not None:  # a voice session's later sentence: by its deadline
        return deadline.RULES
    return CLASSES[request.sla_class]


def _degraded_reason(decision: Decision, workers: list[WorkerLoad] | tuple[WorkerLoad, ...]) -> Decision:
    """With a whole pool gone, say so: the reason operators alert on, whatever the class."""
    pools = {w.pool for w in workers}
    if LL not in pools:
        return _with_reason(decision, reasons.NO_LL_WORKERS)
    if HT not in pools and decision.reason in (reasons.FASTEST_FINISH, reasons.MOST_THROUGHPUT):
        return _with_reason(decision, reasons.NO_HT_WORKERS)
    return decision


def _with_reason(decision: Decision, reason: str) -> Decision:
    return Decision(decision.action, reason, decision.pool, decision.worker_id, decision.predicted_ttfp_s, decision.predicted_rtf)
