"""A routing policy's memory between decisions (the values it decides on are in
``gateway.types.view`` and ``gateway.types.decision``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gateway.types import PoolName


@dataclass(frozen=True, slots=True)
class PolicyState:
    """A policy's memory between decisions, passed in and returned so ``decide`` stays pure.

    Treat as immutable: the ``with_*`` helpers return a new state (``last_picked`` is never
    mutated in place).
    """

    # Hysteresis mode of `balanced`: True once fleet load crossed the threshold, until it
    # falls below threshold - hysteresis.
    balanced_on_high_throughput: bool = False
    # Round-robin tie-breaks: the worker last picked in each scope (a pool name, or "fleet").
    last_picked: Mapping[str, str] = field(default_factory=dict)
    # The `round_robin` baseline's next pool to try first.
    next_pool: PoolName = PoolName.LOW_LATENCY

    def with_picked(self, scope: str, worker_id: str) -> PolicyState:
        return replace(self, last_picked={**self.last_picked, scope: worker_id})
