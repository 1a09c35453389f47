"""Building decisions for the slot-counting policies (`rules`, the baselines): route to
the first option (a pool, in order of preference) with a free slot, else wait, or reject.
They go through the same stages as `adaptive`: filters -> a scorer -> the picker."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.filters import FREE_SLOT, ROUTABLE, InPool, Untried
from gateway.routing.picker import TieBreak
from gateway.routing.scorers import Scorer, fewest_in_flight
from gateway.routing.stages import routed
from gateway.types import PoolName
from gateway.types.decision import Action, Decision
from gateway.types.view import LoadView, RequestInfo, WorkerLoad

# A pool to try and the reason a route there carries, in the policy's order of preference.
Option = tuple[PoolName, str]


def candidates(view: LoadView, request: RequestInfo) -> Sequence[WorkerLoad]:
    """Routable workers with a free slot that this request has not tried."""
    return FREE_SLOT.keep(ROUTABLE.keep(Untried(request.tried).keep(view.workers)))


def first_free(
    view: LoadView, request: RequestInfo, ties: TieBreak, options: Sequence[Option], wait_reason: str,
    scorer: Scorer = fewest_in_flight,
) -> Decision:  # fmt: skip
    """Route to the best worker (fewest in flight) of the first option with a free slot, else WAIT."""
    free = candidates(view, request)
    for pool, reason in options:
        workers = InPool(pool).keep(free)
        if workers:
            chosen = ties.pick(workers, scorer(workers), pool.value)
            assert chosen is not None
            return routed(chosen, reason)
    return wait(wait_reason)


def wait(reason: str) -> Decision:
    return Decision(Action.WAIT, reason)


def reject(reason: str) -> Decision:
    return Decision(Action.REJECT, reason)


def other_pool(pool: PoolName) -> PoolName:
    return PoolName.HIGH_THROUGHPUT if pool == PoolName.LOW_LATENCY else PoolName.LOW_LATENCY
