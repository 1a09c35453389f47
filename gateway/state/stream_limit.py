"""Concurrent speech streams per API key: counted in this process, or fleet-wide in Redis.

A stream holds a *slot* from the moment its key is admitted until the request ends (queued,
streaming, failed: every way out releases it). With the local backend each replica counts
its own streams. With Redis every slot is a lease in one sorted set per key (member: this
replica's holder id, score: the lease's expiry on the Redis clock), taken by one atomic
script that first drops expired leases. Leases are renewed while their streams run, so a
replica that dies mid-stream frees its slots within ``state.stream_lease_ttl_s`` instead of
holding them forever, which a bare counter would. When Redis cannot answer, the failure
mode of the rate limit applies (open: the stream goes through uncounted; closed: 503); a
store that answers but is full refuses the stream in either mode (503).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, Protocol

from gateway.state.errors import StateFull, StateUnavailable
from gateway.state.rate_limit import FULL, FULL_MESSAGE

log = logging.getLogger(__name__)


class StreamSlot(Protocol):
    async def release(self) -> None:
        """Give the slot back; a second call does nothing."""
        ...


class StreamLimiter(Protocol):
    async def acquire(self, key: str, limit: int) -> StreamSlot | None:
        """A slot of ``key``'s ``limit``, or None when all are taken."""
        ...


class _LocalSlot:
    def __init__(self, counts: dict[str, int], key: str) -> None:
        self._counts = counts
        self._key = key
        self._held = True

    async def release(self) -> None:
        if not self._held:
            return
        self._held = False
        left = self._counts[self._key] - 1
        if left:
            self._counts[self._key] = left
        else:
            del self._counts[self._key]  # no entry per key that ever streamed


class LocalStreamLimiter:
    """Streams per key in this process; a limit changed at run time applies to the next one."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    async def acquire(self, key: str, limit: int) -> StreamSlot | None:
        if self._counts.get(key, 0) >= limit:
            return None
        self._counts[key] = self._counts.get(key, 0) + 1
        return _LocalSlot(self._counts, key)


class SharedStreamSource(Protocol):
    @property
    def up(self) -> bool: ...

    async def acquire_stream(self, key: str, limit: int, holder: str, ttl_s: float) -> bool: ...

    async def release_stream(self, key: str, holder: str) -> None: ...

    async def renew_streams(self, leases: Sequence[tuple[str, str]], ttl_s: float) -> None: ...


class _NoSlot:
    """What a stream gets while the store is unreachable and the mode is ``open``."""

    async def release(self) -> None:
        return None


class _SharedSlot:
    def __init__(self, limiter: SharedStreamLimiter, key: str, holder: str) -> None:
        self._limiter = limiter
        self.key = key
        self.holder = holder
        self._held = True

    async def release(self) -> None:
        if self._held:
            self._held = False
            await self._limiter._release(self)


class SharedStreamLimiter:
    """Fleet-wide slots as leases in the shared store, renewed every third of their TTL."""

    def __init__(
        self,
        source: SharedStreamSource,
        failure_mode: Literal["open", "closed"],
        lease_ttl_s: float,
        on_unavailable: Callable[[str], None] = lambda mode: None,
    ) -> None:
        self._source = source
        self._failure_mode = failure_mode
        self._ttl_s = lease_ttl_s
        self._on_unavailable = on_unavailable
        self._replica = uuid.uuid4().hex[:16]  # holder ids stay unique across replicas and restarts
        self._serial = itertools.count()
        self._held: dict[str, _SharedSlot] = {}  # holder -> slot, renewed until released
        self._renewer: asyncio.Task[None] | None = None

    def held(self) -> Mapping[str, str]:
        """holder -> key of every slot this replica holds."""
        return {holder: slot.key for holder, slot in self._held.items()}

    async def acquire(self, key: str, limit: int) -> StreamSlot | None:
        holder = f"{self._replica}:{next(self._serial)}"
        if self._source.up:
            try:
                if not await self._source.acquire_stream(key, limit, holder, self._ttl_s):
                    return None
            except StateFull:
                self._on_unavailable(FULL)
                raise StateFull(FULL_MESSAGE.format(what="Stream limits")) from None
            except StateUnavailable:
                pass
            else:
                slot = _SharedSlot(self, key, holder)
                self._held[holder] = slot
                return slot
        self._on_unavailable(self._failure_mode)
        if self._failure_mode == "closed":
            raise StateUnavailable("Stream limits cannot be checked right now (shared state store unavailable); retry shortly.")
        return _NoSlot()

    async def _release(self, slot: _SharedSlot) -> None:
        self._held.pop(slot.holder, None)
        try:
            await self._source.release_stream(slot.key, slot.holder)
        except StateUnavailable:
            log.debug("stream lease %s not released (store unavailable); it expires on its own", slot.holder)

    # ---- renewal ---------------------------------------------------------------------
    def start(self) -> None:
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_forever(), name="stream-leases")

    async def stop(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def renew(self) -> None:
        leases = [(slot.key, holder) for holder, slot in self._held.items()]
        if leases and self._source.up:
            with contextlib.suppress(StateUnavailable):  # the next round, or expiry, settles it
                await self._source.renew_streams(leases, self._ttl_s)

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self._ttl_s / 3)
            await self.renew()
