"""The default policy: place each request where its predicted outcome is best for its class.

For every routable worker the snapshot carries a ``Curve`` (its learned performance by
load). The policy asks, for each candidate: what if this request went there? With ``L``
requests already on the worker, the request would see TTFP ``ttfp(L+1)`` and every stream
there would run at ``rtf(L+1)``. Per class:

- ``latency``: the low-latency worker with the lowest predicted TTFP (the profile built for
  it); when every one is at its cap, wait within the queue budget, then spill to the
  fastest TTFP anywhere (``spill_ll_full``).
- ``balanced``: the lowest predicted cost: the request's own end-to-end time
  (``ttfp + frames x step``) plus the delay its extra step time adds to the streams
  already there, among workers that stay under ``balanced_rtf_ceiling``. Counting the
  delay imposed on others is what spreads a busy fleet the way that maximises its
  throughput instead of piling on the worker that looks fastest alone.
- ``throughput``: the worker whose delivered audio-seconds per second grows the most
  (its own rate minus the slowdown it causes), up to ``max_num_seqs`` or
  ``throughput_rtf_ceiling``.

Room is dynamic: a worker takes a request while the predicted RTF stays under the class's
ceiling, never past its ``max_num_seqs``, and never past ``max_per_worker`` (or the pool's
``slots_per_worker``) when an operator set one. On low-latency workers, `balanced` leaves
``reserve_for_latency`` places free below the cap, and `throughput` leaves them free below
the latency-grade capacity (the load at which streams stay under ``latency_rtf_ceiling``),
so a `latency` request arriving in a burst is placed at once and keeps a low RTF.

Pure: no I/O, no clock. Curves, loads and caps come in through the ``LoadView``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gateway.config import RoutingThresholds
from gateway.routing.model import PolicyState
from gateway.routing.outcomes import reject, wait
from gateway.types import PoolName, SlaClass, reasons
from gateway.types.codec import FRAMES_PER_SECOND
from gateway.types.curve import Curve, audio_seconds_for
from gateway.types.decision import Action, Decision
from gateway.types.view import LoadView, RequestInfo, WorkerLoad

LL = PoolName.LOW_LATENCY
HT = PoolName.HIGH_THROUGHPUT
FLEET_SCOPE = "fleet"  # the policy state's round-robin scope

# Without an explicit ceiling, latency-grade means at most this much slower than the best
# idle low-latency worker: what `throughput` requests must leave to `latency` ones.
LATENCY_RTF_MARGIN = 1.4


class AdaptivePolicy:
    name = "adaptive"

    def decide(
        self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
    ) -> tuple[Decision, PolicyState]:
        workers = [w for w in view.workers if w.routable and w.curve is not None]
        if not workers:
            return reject(reasons.NO_WORKERS), state
        sla = request.sla_class
        # Equal predictions (identical idle workers) go round-robin, from the last pick on.
        last = state.last_picked.get(FLEET_SCOPE, "")
        if sla == SlaClass.LATENCY:
            decision = _latency(request, workers, thresholds, last)
        elif sla == SlaClass.BALANCED:
            frames = audio_seconds_for(request.input_chars) * FRAMES_PER_SECOND
            decision = _balanced(workers, thresholds, frames, last)
        else:
            decision = _throughput(workers, thresholds, latency_rtf_ceiling(thresholds, workers), last)
        if decision.action is Action.ROUTE and decision.worker_id is not None:
            decision = _degraded_reason(decision, workers)
            state = state.with_picked(FLEET_SCOPE, decision.worker_id)
        return decision, state


def latency_rtf_ceiling(thresholds: RoutingThresholds, workers: Sequence[WorkerLoad]) -> float:
    """The RTF a `latency` stream may run at (the operator's, or 1.4 x the best idle LL RTF)."""
    if thresholds.latency_rtf_ceiling is not None:
        return thresholds.latency_rtf_ceiling
    idle = [w.curve.rtf_s[0] for w in workers if w.curve is not None and w.pool is LL]
    return min(idle or [w.curve.rtf_s[0] for w in workers if w.curve is not None]) * LATENCY_RTF_MARGIN


def hard_cap(worker: WorkerLoad, curve: Curve) -> int:
    """Never more than the operator's cap (slots) or what the engine can run at once."""
    return min(worker.slots, curve.max_load) if worker.slots > 0 else curve.max_load


# Predictions closer than this are a tie: learned curves carry noise, and two workers of the
# same hardware must share the work instead of one winning on a rounding difference.
TIE = 0.03


def _better(value: float, best: float, worker: WorkerLoad, incumbent: WorkerLoad, last: str) -> bool:
    """Lower is better; within TIE of each other, the worker next after ``last`` in id order wins."""
    margin = TIE * abs(best)
    if value < best - margin:
        return True
    if value > best + margin:
        return False
    return _wins_tie(worker, incumbent, last)


def _wins_tie(worker: WorkerLoad, incumbent: WorkerLoad, last: str) -> bool:
    wid, bid = worker.worker_id, incumbent.worker_id
    return (wid <= last, wid) < (bid <= last, bid)


def _latency(request: RequestInfo, workers: list[WorkerLoad], thresholds: RoutingThresholds, last: str) -> Decision:
    best: WorkerLoad | None = None
    best_ttfp = best_rtf = 0.0
    serves_latency = False
    for worker in workers:
        if worker.pool is not LL:
            continue
        serves_latency = True
        curve = worker.curve
        load, slots, size = worker.load, worker.slots, len(curve.step_s)  # type: ignore[union-attr]
        if load >= (slots if 0 < slots < size else size):
            continue
        ttfp, rtf = curve.ttfp_s[load], curve.rtf_s[load]  # type: ignore[union-attr]
        if best is None or _better(ttfp, best_ttfp, worker, best, last):
            best, best_ttfp, best_rtf = worker, ttfp, rtf
    if best is not None:
        return _route(best, reasons.FASTEST_TTFP, best_ttfp, best_rtf)
    if serves_latency and not request.waited_out:
        return wait(reasons.QUEUED_LL_FULL)
    reason = reasons.SPILL_LL_FULL if serves_latency else reasons.NO_LL_WORKERS
    return _fastest_anywhere(workers, thresholds.balanced_rtf_ceiling, reason, last)


def _fastest_anywhere(workers: list[WorkerLoad], ceiling: float, reason: str, last: str) -> Decision:
    best: WorkerLoad | None = None
    best_ttfp = 0.0
    for worker in workers:
        curve = worker.curve
        assert curve is not None
        load = worker.load
        if load >= hard_cap(worker, curve) or (load > 0 and curve.rtf_s[load] > ceiling):
            continue
        ttfp = curve.ttfp_s[load]
        if best is None or _better(ttfp, best_ttfp, worker, best, last):
            best, best_ttfp = worker, ttfp
    if best is None:
        return wait(reasons.QUEUED_ALL_FULL)
    return _route(best, reason, best_ttfp, best.curve.rtf_s[best.load])  # type: ignore[union-attr]


# `balanced` and `throughput` run for every request over every worker (and again for queued
# requests whenever capacity changes): their loops index the curves' precomputed tables,
# keep the tie window of the current best (``low``..``high``) and call out only on a tie.
# With L requests on a worker, index L is the prediction for L + 1, the load this request
# would make.


def _balanced(workers: list[WorkerLoad], thresholds: RoutingThresholds, frames: float, last: str) -> Decision:
    """Lowest own end-to-end time plus the delay the slower step adds to the streams there.

    `balanced` may fill a low-latency worker up to its cap minus ``reserve_for_latency``.
    """
    ceiling = thresholds.balanced_rtf_ceiling
    reserve = _reserve(thresholds, workers)
    best: WorkerLoad | None = None
    low = high = 0.0
    reserved_only = False
    for worker in workers:
        curve = worker.curve
        assert curve is not None
        load, slots, rtf_s = worker.load, worker.slots, curve.rtf_s
        size = len(rtf_s)
        cap = slots if 0 < slots < size else size
        if load >= cap or (load and rtf_s[load] > ceiling):
            continue
        if reserve and load + 1 + reserve > cap and worker.pool is LL:
            reserved_only = True
            continue
        cost = curve.ttfp_s[load] + frames * curve.marginal_step_s[load]
        if best is None or cost < low or (cost <= high and _wins_tie(worker, best, last)):
            best, low, high = worker, cost * (1 - TIE), cost * (1 + TIE)
    if best is None:
        return wait(reasons.QUEUED_LL_RESERVED if reserved_only else reasons.QUEUED_ALL_FULL)
    curve, load = best.curve, best.load
    return _route(best, reasons.FASTEST_FINISH, curve.ttfp_s[load], curve.rtf_s[load])  # type: ignore[union-attr]


def _throughput(workers: list[WorkerLoad], thresholds: RoutingThresholds, latency_ceiling: float, last: str) -> Decision:
    """Most audio-seconds per second added: the worker's new rate minus what it delivered.

    On a low-latency worker `throughput` stays ``reserve_for_latency`` below its
    latency-grade capacity, so a burst of batch work never costs `latency` streams their RTF.
    """
    ceiling = thresholds.throughput_rtf_ceiling
    if ceiling is None:
        ceiling = float("inf")
    reserve = _reserve(thresholds, workers)
    best: WorkerLoad | None = None
    low = high = 0.0  # on the negated gain: lower is better, as everywhere here
    reserved_only = False
    for worker in workers:
        curve = worker.curve
        assert curve is not None
        load, slots, rtf_s = worker.load, worker.slots, curve.rtf_s
        size = len(rtf_s)
        cap = slots if 0 < slots < size else size
        if load >= cap or (load and rtf_s[load] > ceiling):
            continue
        # Past the latency-grade capacity minus the reserve (rtf_s is monotone, so this is
        # load + 1 + reserve > curve.capacity(latency_ceiling, cap), without the call).
        if reserve and worker.pool is LL and (load + reserve >= cap or rtf_s[load + reserve] > latency_ceiling):
            reserved_only = True
            continue
        score = -curve.gain_s[load]
        if best is None or score < low or (score <= high and _wins_tie(worker, best, last)):
            margin = TIE * abs(score)
            best, low, high = worker, score - margin, score + margin
    if best is None:
        return wait(reasons.QUEUED_LL_RESERVED if reserved_only else reasons.QUEUED_ALL_FULL)
    curve, load = best.curve, best.load
    return _route(best, reasons.MOST_THROUGHPUT, curve.ttfp_s[load], curve.rtf_s[load])  # type: ignore[union-attr]


def _reserve(thresholds: RoutingThresholds, workers: list[WorkerLoad]) -> int:
    """The latency reserve, unless low-latency is all there is: then every class must use it."""
    return thresholds.reserve_for_latency if any(w.pool is not LL for w in workers) else 0


def _degraded_reason(decision: Decision, workers: list[WorkerLoad]) -> Decision:
    """With a whole pool gone, say so: the reason operators alert on, whatever the class."""
    pools = {w.pool for w in workers}
    if LL not in pools:
        return replace(decision, reason=reasons.NO_LL_WORKERS)
    if HT not in pools and decision.reason in (reasons.FASTEST_FINISH, reasons.MOST_THROUGHPUT):
        return replace(decision, reason=reasons.NO_HT_WORKERS)
    return decision


def _route(worker: WorkerLoad, reason: str, ttfp_s: float, rtf: float) -> Decision:
    return Decision(Action.ROUTE, reason, worker.pool, worker.worker_id, ttfp_s, rtf)
