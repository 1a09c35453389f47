"""Voice uploads to a worker that is streaming: one at a time, spaced apart.

The released worker reads and saves an uploaded clip synchronously on its event loop
(vllm-omni 0.30.0 ``serving_speech.py`` 948 soundfile decode, 985 safetensors save), so
every stream it serves pauses while it does. Several uploads sent to it at once (a user
uploading ten voices, a fan-out racing a replay) run back to back: one long pause on
every stream. One at a time, ``spacing_s`` apart, each stream pauses for one clip at a
time, which the lead a stream keeps over real-time playback absorbs.

A worker with no stream of ours (starting, being replayed before it serves, or idle)
gets its uploads at once and concurrently: there is nothing to stall, and waiting would
only delay its readiness. There is no better moment to wait for under steady load (a
worker serving c8 is never idle), so a busy worker is never skipped, only paced.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager


class UploadPacer:
    def __init__(
        self,
        streams: Callable[[str], int],
        spacing_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._streams = streams  # base URL -> this gateway's streams in flight there
        self._spacing_s = spacing_s
        self._clock = clock
        self._sleep = sleep
        self._locks: dict[str, asyncio.Lock] = {}
        self._last_end: dict[str, float] = {}

    @asynccontextmanager
    async def turn(self, base_url: str) -> AsyncIterator[None]:
        """Hold while uploading to ``base_url``."""
        if self._spacing_s <= 0 or self._streams(base_url) <= 0:
            yield
            return
        lock = self._locks.setdefault(base_url, asyncio.Lock())
        async with lock:
            wait = self._last_end.get(base_url, float("-inf")) + self._spacing_s - self._clock()
            if wait > 0 and self._streams(base_url) > 0:
                await self._sleep(wait)
            try:
                yield
            finally:
                self._last_end[base_url] = self._clock()
