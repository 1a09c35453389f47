"""Baseline policies for the benchmark: same interface and stages as adaptive, deliberately naive.

Each is a plan of slot-counting stages (``outcomes.first_free``) run by ``stages.place``, as
`adaptive`'s classes are. Each one still waits (never overloads a worker) when everything
it may use is full.
"""

from __future__ import annotations

from gateway.config import RoutingThresholds
from gateway.routing.filters import FREE_SLOT, ROUTABLE
from gateway.routing.outcomes import first_free, other_pool, reject, untried
from gateway.routing.picker import TieBreak
from gateway.routing.scorers import indifferent, most_free_slots
from gateway.routing.stages import FLEET_SCOPE, Plan, Stage, place
from gateway.types import PoolName, reasons
from gateway.types.decision import Action, Decision
from gateway.types.view import LoadView, RequestInfo

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT


class SinglePoolPolicy:
    """Everything to one pool (`low_latency_only` / `high_throughput_only`), least-loaded worker."""

    def __init__(self, pool: PoolName, name: str) -> None:
        self.pool = pool
        self.name = name
        self._ties = TieBreak()
        self._plan = first_free(((pool, name),), reasons.QUEUED_ALL_FULL)

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        if not view.has_workers(self.pool):
            return reject(reasons.NO_WORKERS)
        return place(self._plan, untried(view, request), self._ties)


class RoundRobinPolicy:
    """Alternates pools, and workers within a pool; load only matters when a worker is full."""

    name = reasons.ROUND_ROBIN
    # Which pool is tried first alternates; within a pool every free worker ties.
    _PLANS = {
        first: first_free(((first, reasons.ROUND_ROBIN), (other_pool(first), reasons.ROUND_ROBIN)), reasons.QUEUED_ALL_FULL, indifferent)
        for first in (LL, HT)
    }  # fmt: skip

    def __init__(self) -> None:
        self._ties = TieBreak()
        self._next_pool = LL  # the pool to try first next time

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        if not any(w.routable for w in view.workers):
            return reject(reasons.NO_WORKERS)
        decision = place(self._PLANS[self._next_pool], untried(view, request), self._ties)
        if decision.action is Action.ROUTE:
            assert decision.pool is not None
            self._next_pool = other_pool(decision.pool)
        return decision


class LeastLoadedPolicy:
    """Ignores profiles: the worker with the most free slots anywhere in the fleet."""

    name = reasons.LEAST_LOADED
    _PLAN = Plan((Stage((ROUTABLE, FREE_SLOT), most_free_slots, reasons.LEAST_LOADED, scope=FLEET_SCOPE),), reasons.QUEUED_ALL_FULL)

    def __init__(self) -> None:
        self._ties = TieBreak()

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        if not any(w.routable for w in view.workers):
            return reject(reasons.NO_WORKERS)
        return place(self._PLAN, untried(view, request), self._ties)
