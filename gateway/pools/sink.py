"""How worker sources (static URLs, the supervisor, DNS, Kubernetes) tell the fleet about workers.

Sources only say what exists; the fleet owns every state transition (probing, warm-up,
voice replay, routability). Keeping that one-way stops two owners from racing on a
worker's state.
"""

from __future__ import annotations

from typing import Protocol

from gateway.types import PoolName


class WorkerSink(Protocol):
    def add_worker(self, pool: PoolName, worker_id: str, url: str, managed: bool = False) -> None:
        """A worker exists at ``url`` (it may still be starting). Idempotent per worker_id."""

    def remove_worker(self, worker_id: str) -> None:
        """The worker is gone for good: stop routing to it (in-flight requests finish)."""

    def worker_restarting(self, worker_id: str) -> None:
        """A managed worker's process exited and is being started again: not routable until warm."""

    def worker_failed(self, worker_id: str, reason: str) -> None:
        """A managed worker gave up (crash loop, start timeout): visible, never routable."""
