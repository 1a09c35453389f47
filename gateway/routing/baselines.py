"""Baseline policies for the benchmark: same interface and stages as adaptive, deliberately naive.

Each one still waits (never overloads a worker) when everything it may use is full.
"""

from __future__ import annotations

from gateway.config import RoutingThresholds
from gateway.routing.filters import InPool
from gateway.routing.outcomes import candidates, first_free, other_pool, reject, wait
from gateway.routing.picker import TieBreak
from gateway.routing.scorers import indifferent, most_free_slots
from gateway.routing.stages import routed
from gateway.types import PoolName, reasons
from gateway.types.decision import Decision
from gateway.types.view import LoadView, RequestInfo

FLEET_SCOPE = "fleet"


class SinglePoolPolicy:
    """Everything to one pool (`low_latency_only` / `high_throughput_only`), least-loaded worker."""

    def __init__(self, pool: PoolName, name: str) -> None:
        self.pool = pool
        self.name = name
        self._ties = TieBreak()

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        if not view.has_workers(self.pool):
            return reject(reasons.NO_WORKERS)
        return first_free(view, request, self._ties, [(self.pool, self.name)], reasons.QUEUED_ALL_FULL)


class RoundRobinPolicy:
    """Alternates pools, and workers within a pool; load only matters when a worker is full."""

    name = reasons.ROUND_ROBIN

    def __init__(self) -> None:
        self._ties = TieBreak()
        self._next_pool = PoolName.LOW_LATENCY  # the pool to try first next time

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        if not any(w.routable for w in view.workers):
            return reject(reasons.NO_WORKERS)
        free = candidates(view, request)
        for pool in (self._next_pool, other_pool(self._next_pool)):
            workers = InPool(pool).keep(free)
            if workers:
                chosen = self._ties.pick(workers, indifferent(workers), pool.value)
                assert chosen is not None
                self._next_pool = other_pool(pool)
                return routed(chosen, reasons.ROUND_ROBIN)
        return wait(reasons.QUEUED_ALL_FULL)


class LeastLoadedPolicy:
    """Ignores profiles: the worker with the most free slots anywhere in the fleet."""

    name = reasons.LEAST_LOADED

    def __init__(self) -> None:
        self._ties = TieBreak()

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        if not any(w.routable for w in view.workers):
            return reject(reasons.NO_WORKERS)
        free = candidates(view, request)
        if not free:
            return wait(reasons.QUEUED_ALL_FULL)
        chosen = self._ties.pick(free, most_free_slots(free), FLEET_SCOPE)
        assert chosen is not None
        return routed(chosen, reasons.LEAST_LOADED)
