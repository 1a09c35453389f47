"""A request's claim on one worker slot: in-flight +1 on take, -1 exactly once on release.

This is the single place the gateway's in-flight counters go down. Every exit path of a
request (finished, failed, retried elsewhere, client gone before the first byte or
mid-stream, cancelled while streaming) calls ``release``; calling it twice is harmless.
A counter that drifts upward would silently make routing think a worker is full forever.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.pools.events import FleetEvents
from gateway.pools.members import Members
from gateway.pools.worker import Worker


class Lease:
    __slots__ = ("worker", "_on_release", "_released")

    def __init__(self, worker: Worker, on_release: Callable[[Worker], None]) -> None:
        worker.inflight += 1
        self.worker = worker
        self._on_release = on_release
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self.worker.inflight -= 1
        self._on_release(self.worker)


class Leases:
    """Hands out leases on the members' workers; a release may free capacity."""

    def __init__(self, members: Members, events: FleetEvents, clock: Callable[[], float]) -> None:
        self._members = members
        self._events = events
        self._clock = clock

    def lease(self, worker_id: str) -> Lease:
        worker = self._members.get(worker_id)
        if worker is None:
            raise KeyError(worker_id)
        return Lease(worker, self._released)

    def _released(self, worker: Worker) -> None:
        worker.note_release(self._clock())
        self._events.slot_freed()
