"""A request's claim on one worker slot: in-flight +1 on take, -1 exactly once on release.

This is the single place the gateway's in-flight counters go down. Every exit path of a
request (finished, failed, retried elsewhere, client gone before the first byte or
mid-stream, cancelled while streaming) calls ``release``; calling it twice is harmless.
A counter that drifts upward would silently make routing think a worker is full forever.

With a fleet view shared between gateway replicas (``state.backend: redis``), every take
and release is also told to it (``SharedLeases``), so the other replicas count the lease
too; with the local backend there is none and a lease costs what it always did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.pools.events import FleetEvents
from gateway.pools.members import Members
from gateway.pools.worker import Worker


class SharedLeases(Protocol):
    """The fleet-wide record of leases (gateway.state.inflight)."""

    def taken(self, lease: Lease) -> None: ...

    def released(self, lease: Lease) -> None: ...

    async def confirm(self, lease: Lease) -> bool:
        """False when the decision behind the lease missed other replicas' leases on its worker
        (a stale view), or the fleet held all its slots: the policy decides again, once."""
        ...

    async def published(self, lease: Lease) -> None:
        """Returns once the other replicas have been told of the (released) lease's release,
        or the wait's bound passed."""
        ...


class Lease:
    __slots__ = ("worker", "_on_release", "_released", "_shared", "shared_id")

    def __init__(self, worker: Worker, on_release: Callable[[Worker], None], shared: SharedLeases | None = None) -> None:
        worker.lease_taken()
        self.worker = worker
        self._on_release = on_release
        self._released = False
        self._shared = shared
        self.shared_id: str | None = None  # its id in the fleet view, once it is told
        if shared is not None:
            shared.taken(self)

    @property
    def released(self) -> bool:
        return self._released

    async def confirm(self) -> bool:
        """Whether the slot is this lease's fleet-wide (always, without a fleet view)."""
        return True if self._shared is None else await self._shared.confirm(self)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self.worker.lease_returned()
        if self._shared is not None:
            self._shared.released(self)
        self._on_release(self.worker)

    async def release_fleet_wide(self) -> None:
        """Release, and return once every replica knows (at once without a fleet view)."""
        self.release()
        if self._shared is not None:
            await self._shared.published(self)


class Leases:
    """Hands out leases on the members' workers; a release may free capacity."""

    def __init__(self, members: Members, events: FleetEvents, clock: Callable[[], float]) -> None:
        self._members = members
        self._events = events
        self._clock = clock
        self._shared: SharedLeases | None = None

    def share(self, shared: SharedLeases) -> None:
        """Tell the fleet view of every lease from now on (the composition root, once)."""
        self._shared = shared

    def lease(self, worker_id: str) -> Lease:
        worker = self._members.get(worker_id)
        if worker is None:
            raise KeyError(worker_id)
        return Lease(worker, self._released, self._shared)

    def _released(self, worker: Worker) -> None:
        worker.note_release(self._clock())
        self._events.slot_freed()
