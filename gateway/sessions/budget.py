"""The audio a session holds in memory: received from workers, not yet sent to its client.

Bounded by the look-ahead window (``sessions.lookahead_s`` of PCM): a sentence reads its
worker's stream only while the session holds less than that, so a client that stops
reading stops the reads too (the worker's stream waits, on its own TCP flow control)
instead of growing the gateway's memory. One exception keeps audio flowing: the sentence
being delivered may always read when none of its own audio is waiting, because the
delivery is then waiting for exactly that audio (later sentences that filled the budget
ahead of it must not stall it). The session so holds at most the window plus one chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class AudioBudget:
    def __init__(self, limit_bytes: int, on_change: Callable[[int], None] = lambda delta: None) -> None:
        self.limit_bytes = limit_bytes
        self.buffered = 0  # bytes received and not yet taken for sending, all sentences together
        self._on_change = on_change  # the replica-wide gauge of buffered session audio
        self._head: object | None = None  # the sentence being delivered
        self._waiters: list[asyncio.Future[None]] = []

    def may_read(self, reader: object, own_buffered: int) -> bool:
        return self.buffered < self.limit_bytes or (reader is self._head and own_buffered == 0)

    async def room(self, reader: object, own_buffered: Callable[[], int]) -> None:
        """Return once ``reader`` may read its next chunk."""
        while not self.may_read(reader, own_buffered()):
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def delivering(self, head: object | None) -> None:
        self._head = head
        self._wake()

    def added(self, count: int) -> None:
        self.buffered += count
        self._on_change(count)

    def taken(self, count: int) -> None:
        self.buffered -= count
        self._on_change(-count)
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
