"""What the routing policy sees and what it answers: plain immutable values, no I/O.

The pools build a ``LoadView`` snapshot per decision; the policy turns
(``RequestInfo``, ``LoadView``, thresholds) into a ``Decision``. Keeping both sides as
frozen data is what lets the policy be a pure function with table-driven tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.types import PoolName, SlaClass


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """The request as routing sees it: never the text itself, only its length."""

    sla_class: SlaClass
    ttfp_budget_ms: float | None
    input_chars: int


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """One worker at the instant of the decision."""

    worker_id: str
    pool: PoolName
    routable: bool  # ready, not draining, ejected or starting
    inflight: int  # this gateway's own leases: exact
    reported: int | None  # the worker's own running+waiting; None when missing or stale
    slots: int  # how many requests this worker should carry at once

    @property
    def load(self) -> int:
        # The larger of the two: the worker's report also counts other gateway replicas'
        # requests, our own count is exact and never lags behind our newest lease.
        return max(self.inflight, self.reported or 0)

    @property
    def free(self) -> int:
        return max(0, self.slots - self.load)


@dataclass(frozen=True, slots=True)
class LoadView:
    """Every worker of both pools at one instant."""

    workers: tuple[WorkerLoad, ...]

    def pool(self, pool: PoolName) -> tuple[WorkerLoad, ...]:
        return tuple(w for w in self.workers if w.pool == pool)

    def routable(self, pool: PoolName) -> tuple[WorkerLoad, ...]:
        return tuple(w for w in self.workers if w.pool == pool and w.routable)

    def capacity(self, pool: PoolName) -> int:
        return sum(w.slots for w in self.routable(pool))

    def load(self, pool: PoolName) -> int:
        return sum(w.load for w in self.pool(pool))

    def free(self, pool: PoolName) -> int:
        return sum(w.free for w in self.routable(pool))

    def fleet_load(self) -> int:
        return sum(w.load for w in self.workers)


class Action(StrEnum):
    ROUTE = "route"  # send it to ``worker_id`` now
    WAIT = "wait"  # nothing suitable is free; admission queues it and asks again
    REJECT = "reject"  # nothing can serve it (e.g. no routable worker at all)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str
    pool: PoolName | None = None
    worker_id: str | None = None
