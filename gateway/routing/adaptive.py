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

from gateway.config import RoutingThresholds
from gateway.routing import reasons
from gateway.routing.curves import FRAMES_PER_SECOND, Curve, audio_seconds_for
from gateway.routing.model import Action, Decision, LoadView, PolicyState, RequestInfo, WorkerLoad
from gateway.routing.outcomes import reject, wait
from gateway.types import PoolName, SlaClass

LL = PoolName.LOW_LATENCY

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
        latency_ceiling = latency_rtf_ceiling(thresholds, workers)
        frames = audio_seconds_for(request.input_chars) * FRAMES_PER_SECOND
        if request.sla_class == SlaClass.LATENCY:
            decision = _latency(request, workers, thresholds)
        elif request.sla_class == SlaClass.BALANCED:
            decision = _balanced(workers, thresholds, latency_ceiling, frames)
        else:
            decision = _throughput(workers, thresholds, latency_ceiling)
        if decision.worker_id is not None:
            state = state.with_picked("fleet", decision.worker_id)
        return decision, state


def latency_rtf_ceiling(thresholds: RoutingThresholds, workers: list[WorkerLoad]) -> float:
    if thresholds.latency_rtf_ceiling is not None:
        return thresholds.latency_rtf_ceiling
    idle = [w.curve.rtf(1) for w in workers if w.curve is not None and w.pool is LL]
    return min(idle or [w.curve.rtf(1) for w in workers if w.curve is not None]) * LATENCY_RTF_MARGIN


def hard_cap(worker: WorkerLoad, curve: Curve) -> int:
    """Never more than the operator's cap (slots) or what the engine can run at once."""
    return min(worker.slots, curve.max_load) if worker.slots > 0 else curve.max_load


def _latency(request: RequestInfo, workers: list[WorkerLoad], thresholds: RoutingThresholds) -> Decision:
    best: Decision | None = None
    best_ttfp = best_rtf = 0.0
    serves_latency = False
    for worker in workers:
        curve = worker.curve
        assert curve is not None
        if worker.pool is not LL:
            continue
        serves_latency = True
        load = worker.load + 1
        if load > hard_cap(worker, curve):
            continue
        ttfp, rtf = curve.ttfp(load), curve.rtf(load)
        if best is None or (ttfp, rtf) < (best_ttfp, best_rtf):
            best, best_ttfp, best_rtf = _route(worker, reasons.FASTEST_TTFP, ttfp, rtf), ttfp, rtf
    if best is not None:
        return best
    if serves_latency and not request.waited_out:
        return wait(reasons.QUEUED_LL_FULL)
    reason = reasons.SPILL_LL_FULL if serves_latency else reasons.NO_LL_WORKERS
    return _fastest_anywhere(workers, thresholds.balanced_rtf_ceiling, reason)


def _fastest_anywhere(workers: list[WorkerLoad], ceiling: float, reason: str) -> Decision:
    best: Decision | None = None
    best_ttfp = 0.0
    for worker in workers:
        curve = worker.curve
        assert curve is not None
        load = worker.load + 1
        if load > hard_cap(worker, curve) or (load > 1 and curve.rtf(load) > ceiling):
            continue
        ttfp = curve.ttfp(load)
        if best is None or ttfp < best_ttfp:
            best, best_ttfp = _route(worker, reason, ttfp, curve.rtf(load)), ttfp
    return best or wait(reasons.QUEUED_ALL_FULL)


def _reserve_allows(
    worker: WorkerLoad, curve: Curve, load: int, reserve: int, latency_ceiling: float, latency_grade_only: bool
) -> bool:
    """May a non-latency request make ``load`` here and still leave room for ``reserve`` latency ones?

    `balanced` requests may fill a low-latency worker up to its hard cap minus the reserve
    (they want its speed too); `throughput` requests only up to its latency-grade
    capacity minus the reserve, so batch bursts never cost `latency` streams their RTF.
    """
    if reserve <= 0 or worker.pool is not LL:
        return True  # nothing to protect on a worker that does not serve `latency`
    room = curve.capacity(latency_ceiling, hard_cap(worker, curve)) if latency_grade_only else hard_cap(worker, curve)
    return load + reserve <= room


def _balanced(workers: list[WorkerLoad], thresholds: RoutingThresholds, latency_ceiling: float, frames: float) -> Decision:
    ceiling = thresholds.balanced_rtf_ceiling
    reserve = thresholds.reserve_for_latency
    best: Decision | None = None
    best_cost = 0.0
    reserved_only = False
    for worker in workers:
        curve = worker.curve
        assert curve is not None
        current = worker.load
        load = current + 1
        if load > hard_cap(worker, curve) or (load > 1 and curve.rtf(load) > ceiling):
            continue
        if not _reserve_allows(worker, curve, load, reserve, latency_ceiling, latency_grade_only=False):
            reserved_only = True
            continue
        step = curve.step(load)
        ttfp = curve.ttfp(load)
        # Own end-to-end time, plus what the slower step costs the streams already there
        # over the (at most) same number of frames.
        cost = ttfp + frames * step + current * frames * (step - curve.step(current) if current else 0.0)
        if best is None or cost < best_cost:
            best, best_cost = _route(worker, reasons.FASTEST_FINISH, ttfp, step * FRAMES_PER_SECOND), cost
    if best is not None:
        return best
    return wait(reasons.QUEUED_LL_RESERVED if reserved_only else reasons.QUEUED_ALL_FULL)


def _throughput(workers: list[WorkerLoad], thresholds: RoutingThresholds, latency_ceiling: float) -> Decision:
    ceiling = thresholds.throughput_rtf_ceiling
    reserve = thresholds.reserve_for_latency
    best: Decision | None = None
    best_gain = 0.0
    reserved_only = False
    for worker in workers:
        curve = worker.curve
        assert curve is not None
        current = worker.load
        load = current + 1
        if load > hard_cap(worker, curve) or (ceiling is not None and load > 1 and curve.rtf(load) > ceiling):
            continue
        if not _reserve_allows(worker, curve, load, reserve, latency_ceiling, latency_grade_only=True):
            reserved_only = True
            continue
        gain = curve.rate(load) - curve.rate(current)
        if best is None or gain > best_gain:
            best, best_gain = _route(worker, reasons.MOST_THROUGHPUT, curve.ttfp(load), curve.rtf(load)), gain
    if best is not None:
        return best
    return wait(reasons.QUEUED_LL_RESERVED if reserved_only else reasons.QUEUED_ALL_FULL)


def _route(worker: WorkerLoad, reason: str, ttfp_s: float, rtf: float) -> Decision:
    return Decision(Action.ROUTE, reason, worker.pool, worker.worker_id, ttfp_s, rtf)
