"""The first build's rule policy, kept as the `rules` baseline: fixed slots and thresholds.

low-latency (CUDA graphs) wins on RTF at 1-4 requests per worker and loses from ~8 on;
high-throughput runs up to 64. So `latency` holds out for low-latency slots, `balanced`
uses low-latency until the fleet gets busy, and `throughput` lives on high-throughput,
borrowing low-latency only beyond a reserve kept for `latency`. It leaves the
low-latency worker idle above the threshold; the default `adaptive` policy (predictions
instead of slots) replaced it, and the benchmark compares the two on the same traffic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gateway.config import RoutingThresholds
from gateway.routing.capacity import balanced_threshold, latency_reserve
from gateway.routing.model import PolicyState
from gateway.routing.outcomes import Option, first_free, reject
from gateway.types import PoolName, SlaClass, reasons
from gateway.types.decision import Decision
from gateway.types.view import LoadView, RequestInfo

LL = PoolName.LOW_LATENCY
HT = PoolName.HIGH_THROUGHPUT

ClassRule = Callable[[RequestInfo, LoadView, RoutingThresholds, PolicyState], tuple[Decision, PolicyState]]


class RulesPolicy:
    name = "rules"

    def __init__(self) -> None:
        self._rules: dict[SlaClass, ClassRule] = {
            SlaClass.LATENCY: _latency,
            SlaClass.BALANCED: _balanced,
            SlaClass.THROUGHPUT: _throughput,
        }

    def decide(
        self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
    ) -> tuple[Decision, PolicyState]:
        if not (view.has_workers(LL) or view.has_workers(HT)):
            return reject(reasons.NO_WORKERS), state
        return self._rules[request.sla_class](request, view, thresholds, state)


def _latency(
    request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
) -> tuple[Decision, PolicyState]:
    if not view.has_workers(LL):
        # Waiting for a pool with no workers is pointless: take high-throughput at once.
        return first_free(view, state, [(HT, reasons.NO_LL_WORKERS)], reasons.QUEUED_ALL_FULL)
    if not request.waited_out:
        return first_free(view, state, [(LL, reasons.LL_SLOT_FREE)], reasons.QUEUED_LL_FULL)
    # Budget spent: any slot now. If none, keep waiting until admission's deadline rather
    # than reject; a slot freeing a moment later still beats an error.
    options = [(LL, reasons.LL_SLOT_FREE), (HT, reasons.SPILL_LL_FULL)]
    return first_free(view, state, options, reasons.QUEUED_ALL_FULL)


def _balanced(
    request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
) -> tuple[Decision, PolicyState]:
    on_high_throughput = balanced_mode(
        state.balanced_on_high_throughput,
        view.fleet_load(),
        balanced_threshold(thresholds, view),
        thresholds.balanced_hysteresis,
    )
    state = replace(state, balanced_on_high_throughput=on_high_throughput)
    options: list[Option]
    if not view.has_workers(LL):
        options = [(HT, reasons.NO_LL_WORKERS)]
    elif not on_high_throughput:
        options = [(LL, reasons.BALANCED_UNDER_THRESHOLD), (HT, reasons.SPILL_LL_FULL)]
    elif view.has_workers(HT):
        options = [(HT, reasons.BALANCED_OVER_THRESHOLD), (LL, reasons.SPILL_HT_FULL)]
    else:
        options = [(LL, reasons.NO_HT_WORKERS)]
    return first_free(view, state, options, reasons.QUEUED_ALL_FULL)


def balanced_mode(on_high_throughput: bool, fleet_load: int, threshold: int, hysteresis: int) -> bool:
    """Hysteresis: go to high-throughput at load >= threshold, come back below threshold - hysteresis.

    Without the band, a steady stream right at the threshold would flip pools on every request.
    """
    if on_high_throughput:
        return fleet_load >= threshold - hysteresis
    return fleet_load >= threshold


def _throughput(
    request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
) -> tuple[Decision, PolicyState]:
    ll_free = view.free(LL)
    # Borrowing one slot must leave the whole reserve free for latency requests to come.
    may_borrow = ll_free - 1 >= latency_reserve(thresholds, view)
    options: list[Option] = []
    if view.has_workers(HT):
        options.append((HT, reasons.THROUGHPUT_DEFAULT))
        borrow: Option = (LL, reasons.BORROW_LL)
    else:
        borrow = (LL, reasons.NO_HT_WORKERS)
    if may_borrow:
        options.append(borrow)
    wait_reason = reasons.QUEUED_LL_RESERVED if ll_free > 0 and not may_borrow else reasons.QUEUED_ALL_FULL
    return first_free(view, state, options, wait_reason)
