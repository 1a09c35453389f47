"""Baseline policies for the benchmark: same interface as adaptive, deliberately naive.

Each one still waits (never overloads a worker) when everything it may use is full.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.config import RoutingThresholds
from gateway.routing.model import PolicyState
from gateway.routing.outcomes import first_free, other_pool, reject, route, wait
from gateway.routing.picker import choose
from gateway.routing.scorers import indifferent, most_free_slots
from gateway.types import PoolName, reasons
from gateway.types.decision import Decision
from gateway.types.view import LoadView, RequestInfo

FLEET_SCOPE = "fleet"


class SinglePoolPolicy:
    """Everything to one pool (`low_latency_only` / `high_throughput_only`), least-loaded worker."""

    def __init__(self, pool: PoolName, name: str) -> None:
        self.pool = pool
        self.name = name

    def decide(
        self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
    ) -> tuple[Decision, PolicyState]:
        if not view.has_workers(self.pool):
            return reject(reasons.NO_WORKERS), state
        return first_free(view, state, [(self.pool, self.name)], reasons.QUEUED_ALL_FULL)


class RoundRobinPolicy:
    """Alternates pools, and workers within a pool; load only matters when a worker is full."""

    name = reasons.ROUND_ROBIN

    def decide(
        self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
    ) -> tuple[Decision, PolicyState]:
        if not any(w.routable for w in view.workers):
            return reject(reasons.NO_WORKERS), state
        for pool in (state.next_pool, other_pool(state.next_pool)):
            worker, picked_state = choose(view.pool(pool), pool.value, state, indifferent)
            if worker is not None:
                decision = route(pool, worker.worker_id, reasons.ROUND_ROBIN)
                return decision, replace(picked_state, next_pool=other_pool(pool))
        return wait(reasons.QUEUED_ALL_FULL), state


class LeastLoadedPolicy:
    """Ignores profiles: the worker with the most free slots anywhere in the fleet."""

    name = reasons.LEAST_LOADED

    def decide(
        self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
    ) -> tuple[Decision, PolicyState]:
        if not any(w.routable for w in view.workers):
            return reject(reasons.NO_WORKERS), state
        worker, picked_state = choose(view.workers, FLEET_SCOPE, state, most_free_slots)
        if worker is None:
            return wait(reasons.QUEUED_ALL_FULL), state
        return route(worker.pool, worker.worker_id, reasons.LEAST_LOADED), picked_state
