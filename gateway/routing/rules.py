"""The first build's rule policy, kept as the `rules` baseline: fixed slots and thresholds.

low-latency (CUDA graphs) wins on RTF at 1-4 requests per worker and loses from ~8 on;
high-throughput runs up to 64. So `latency` holds out for low-latency slots, `balanced`
uses low-latency until the fleet gets busy, and `throughput` lives on high-throughput,
borrowing low-latency only beyond a reserve kept for `latency`. It leaves the
low-latency worker idle above the threshold; the default `adaptive` policy (predictions
instead of slots) replaced it, and the benchmark compares the two on the same traffic.
"""

from __future__ import annotations

from gateway.config import RoutingThresholds
from gateway.routing.capacity import balanced_threshold
from gateway.routing.reserve import static_latency_reserve
from gateway.routing.outcomes import Option, first_free, reject, untried
from gateway.routing.picker import TieBreak
from gateway.routing.stages import place
from gateway.types import PoolName, SlaClass, reasons
from gateway.types.decision import Decision
from gateway.types.view import LoadView, RequestInfo

LL = PoolName.LOW_LATENCY
HT = PoolName.HIGH_THROUGHPUT


class RulesPolicy:
    name = "rules"

    def __init__(self) -> None:
        self._ties = TieBreak()
        # Hysteresis mode of `balanced`: True once fleet load crossed the threshold, until
        # it falls below threshold - hysteresis.
        self._balanced_on_high_throughput = False

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        if not (view.has_workers(LL) or view.has_workers(HT)):
            return reject(reasons.NO_WORKERS)
        if request.sla_class is SlaClass.LATENCY:
            return self._latency(request, view)
        if request.sla_class is SlaClass.BALANCED:
            return self._balanced(request, view, thresholds)
        return self._throughput(request, view, thresholds)

    def _latency(self, request: RequestInfo, view: LoadView) -> Decision:
        if not view.has_workers(LL):
            # Waiting for a pool with no workers is pointless: take high-throughput at once.
            return self._first_free(view, request, ((HT, reasons.NO_LL_WORKERS),), reasons.QUEUED_ALL_FULL)
        if not request.waited_out:
            return self._first_free(view, request, ((LL, reasons.LL_SLOT_FREE),), reasons.QUEUED_LL_FULL)
        # Budget spent: any slot now. If none, keep waiting until admission's deadline rather
        # than reject; a slot freeing a moment later still beats an error.
        options = ((LL, reasons.LL_SLOT_FREE), (HT, reasons.SPILL_LL_FULL))
        return self._first_free(view, request, options, reasons.QUEUED_ALL_FULL)

    def _balanced(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        on_high_throughput = self._balanced_on_high_throughput = balanced_mode(
            self._balanced_on_high_throughput,
            view.fleet_load(),
            balanced_threshold(thresholds, view),
            thresholds.balanced_hysteresis,
        )
        options: tuple[Option, ...]
        if not view.has_workers(LL):
            options = ((HT, reasons.NO_LL_WORKERS),)
        elif not on_high_throughput:
            options = ((LL, reasons.BALANCED_UNDER_THRESHOLD), (HT, reasons.SPILL_LL_FULL))
        elif view.has_workers(HT):
            options = ((HT, reasons.BALANCED_OVER_THRESHOLD), (LL, reasons.SPILL_HT_FULL))
        else:
            options = ((LL, reasons.NO_HT_WORKERS),)
        return self._first_free(view, request, options, reasons.QUEUED_ALL_FULL)

    def _throughput(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        ll_free = view.free(LL)
        # Borrowing one slot must leave the whole reserve free for latency requests to come.
        may_borrow = ll_free - 1 >= static_latency_reserve(thresholds, view)
        options: tuple[Option, ...] = ()
        if view.has_workers(HT):
            options = ((HT, reasons.THROUGHPUT_DEFAULT),)
            borrow: Option = (LL, reasons.BORROW_LL)
        else:
            borrow = (LL, reasons.NO_HT_WORKERS)
        if may_borrow:
            options = (*options, borrow)
        wait_reason = reasons.QUEUED_LL_RESERVED if ll_free > 0 and not may_borrow else reasons.QUEUED_ALL_FULL
        return self._first_free(view, request, options, wait_reason)

    def _first_free(self, view: LoadView, request: RequestInfo, options: tuple[Option, ...], wait_reason: str) -> Decision:
        return place(first_free(options, wait_reason), untried(view, request), self._ties)


def balanced_mode(on_high_throughput: bool, fleet_load: int, threshold: int, hysteresis: int) -> bool:
    """Hysteresis: go to high-throughput at load >= threshold, come back below threshold - hysteresis.

    Without the band, a steady stream right at the threshold would flip pools on every request.
    """
    if on_high_throughput:
        return fleet_load >= threshold - hysteresis
    return fleet_load >= threshold
