"""Building decisions: route to the first option with a free slot, else wait, or reject."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.model import PolicyState
from gateway.routing.picker import choose
from gateway.types import PoolName
from gateway.types.decision import Action, Decision
from gateway.types.view import LoadView

# A pool to try and the reason a route there carries, in the policy's order of preference.
Option = tuple[PoolName, str]


def first_free(
    view: LoadView, state: PolicyState, options: Sequence[Option], wait_reason: str
) -> tuple[Decision, PolicyState]:
    """Route to the least-loaded worker of the first option with a free slot, else WAIT."""
    for pool, reason in options:
        worker, picked_state = choose(view.pool(pool), pool.value, state)
        if worker is not None:
            return route(pool, worker.worker_id, reason), picked_state
    return wait(wait_reason), state


def route(pool: PoolName, worker_id: str, reason: str) -> Decision:
    return Decision(Action.ROUTE, reason, pool, worker_id)


def wait(reason: str) -> Decision:
    return Decision(Action.WAIT, reason)


def reject(reason: str) -> Decision:
    return Decision(Action.REJECT, reason)


def other_pool(pool: PoolName) -> PoolName:
    return PoolName.HIGH_THROUGHPUT if pool == PoolName.LOW_LATENCY else PoolName.LOW_LATENCY
