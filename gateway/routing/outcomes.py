"""The slot-counting policies' plans (`rules`, the baselines), and the answers that place nothing.

``first_free`` is the plan those policies are made of: route to the first option (a pool,
in order of preference) with a free slot, else wait. It runs through ``stages.place`` as
every class of `adaptive` does: filters -> a scorer -> the picker.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from gateway.routing.filters import FREE_SLOT, ROUTABLE, InPool, Untried
from gateway.routing.scorers import Scorer, fewest_in_flight
from gateway.routing.stages import Plan, Stage
from gateway.types import PoolName
from gateway.types.decision import Action, Decision
from gateway.types.view import LoadView, RequestInfo, WorkerLoad

# A pool to try and the reason a route there carries, in the policy's order of preference.
Option = tuple[PoolName, str]


@cache  # a handful of option lists per policy: each plan is built once
def first_free(options: tuple[Option, ...], wait_reason: str, scorer: Scorer = fewest_in_flight) -> Plan:
    """One stage per option: the pool's routable workers with a free slot, best ``scorer``
    first (fewest in flight), ties rotating within the pool; else WAIT with ``wait_reason``."""
    stages = (Stage((InPool(pool), ROUTABLE, FREE_SLOT), scorer, reason, scope=pool.value) for pool, reason in options)
    return Plan(tuple(stages), wait_reason)


def untried(view: LoadView, request: RequestInfo) -> Sequence[WorkerLoad]:
    """The workers a slot-counting plan chooses from: all but those a retry already tried."""
    return Untried(request.tried).keep(view.workers)


def wait(reason: str) -> Decision:
    return Decision(Action.WAIT, reason)


def reject(reason: str) -> Decision:
    return Decision(Action.REJECT, reason)


def other_pool(pool: PoolName) -> PoolName:
    return PoolName.HIGH_THROUGHPUT if pool == PoolName.LOW_LATENCY else PoolName.LOW_LATENCY
