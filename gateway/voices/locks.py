"""Per-voice-name shared/exclusive locks.

``add`` and ``delete`` of a name take it exclusively (store write + fan-out as one unit);
replays take it shared, so replays of different workers run side by side while no replay
can upload a voice that a concurrent ``delete`` is removing, or race an ``add`` of the same
name. Locks are created on demand and dropped when unused, so the table stays as small
as the number of names being worked on.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from gateway.voices.names import name_key


class SharedExclusiveLock:
    """FIFO reader/writer lock: a waiting writer blocks later readers (no writer starvation)."""

    def __init__(self) -> None:
        self._readers = 0
        self._writer = False
        self._waiters: deque[tuple[asyncio.Future[None], bool]] = deque()

    async def acquire(self, exclusive: bool) -> None:
        if not self._waiters and self._grantable(exclusive):
            self._grant(exclusive)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((future, exclusive))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(exclusive)  # granted just as we were cancelled: give it back
            else:
                self._waiters.remove((future, exclusive))
                self._wake()
            raise

    def release(self, exclusive: bool) -> None:
        if exclusive:
            self._writer = False
        else:
            self._readers -= 1
        self._wake()

    @property
    def idle(self) -> bool:
        return not self._writer and self._readers == 0 and not self._waiters

    def _grantable(self, exclusive: bool) -> bool:
        return not self._writer and (not exclusive or self._readers == 0)

    def _grant(self, exclusive: bool) -> None:
        if exclusive:
            self._writer = True
        else:
            self._readers += 1

    def _wake(self) -> None:
        while self._waiters:
            future, exclusive = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if not self._grantable(exclusive):
                return
            self._waiters.popleft()
            self._grant(exclusive)
            future.set_result(None)
            if exclusive:
                return


class NameLocks:
    """One ``SharedExclusiveLock`` per case-insensitive voice name."""

    def __init__(self) -> None:
        self._locks: dict[str, SharedExclusiveLock] = {}

    @asynccontextmanager
    async def hold(self, name: str, exclusive: bool) -> AsyncIterator[None]:
        key = name_key(name)
        lock = self._locks.setdefault(key, SharedExclusiveLock())
        try:
            await lock.acquire(exclusive)
        except BaseException:
            self._forget_if_idle(key, lock)
            raise
        try:
            yield
        finally:
            lock.release(exclusive)
            self._forget_if_idle(key, lock)

    def exclusive(self, name: str) -> AbstractAsyncContextManager[None]:
        return self.hold(name, exclusive=True)

    def shared(self, name: str) -> AbstractAsyncContextManager[None]:
        return self.hold(name, exclusive=False)

    def __len__(self) -> int:
        return len(self._locks)

    def _forget_if_idle(self, key: str, lock: SharedExclusiveLock) -> None:
        if lock.idle and self._locks.get(key) is lock:
            del self._locks[key]
