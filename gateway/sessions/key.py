"""A session's hold on its API key's limits: a rate-limit token per utterance, a stream slot per sentence.

A session is its key's like any request: every utterance spends from the key's rate limit
(as one speech request would), and every sentence with a request in flight holds one of
the key's concurrent-stream slots (the limiter HTTP speech requests take theirs from), so a
session never runs more worker streams than its tier allows, and the key's other requests
see the slots the session holds.

``SessionStreams`` hands a slot from a sentence that ended straight to the next one waiting
for it, so pipelining inside one session never loses its slot to another request in
between; a sentence that finds every slot taken by *other* requests (the session holds
none) fails, as an HTTP request would get 429.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from gateway.errors import GatewayError


class StreamHold(Protocol):
    """One of the key's stream slots (or nothing to hold when its tier sets no limit)."""

    async def close(self) -> None:
        """Give it back; a second call does nothing."""
        ...


class SessionKey(Protocol):
    async def spend_utterance(self) -> None:
        """One utterance against the key's rate limit; raises ``GatewayError`` (429) when over it."""
        ...

    async def open_stream(self) -> StreamHold | None:
        """A stream slot of the key, or None when every one is taken; may raise ``GatewayError``
        (the shared store cannot count, failing closed)."""
        ...


class _Free:
    async def close(self) -> None:
        return None


class UnlimitedKey:
    """No keys configured: nothing to spend, nothing to hold."""

    async def spend_utterance(self) -> None:
        return None

    async def open_stream(self) -> StreamHold | None:
        return _Free()


class StreamsTaken(Exception):
    """Every slot of the key is held by its other requests: the sentence fails with this text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


STREAMS_TAKEN = "every concurrent stream of this API key is in use by its other requests; retry when one has finished"


class SessionStreams:
    """The key's stream slots one session's sentences hold."""

    def __init__(self, key: SessionKey) -> None:
        self._key = key
        self.held = 0  # slots held by this session's sentences (handed-over ones included)
        self._waiters: deque[asyncio.Future[StreamHold]] = deque()

    async def take(self) -> StreamHold:
        """A slot for one sentence: a fresh one, or the next one this session's sentences give
        back; ``StreamsTaken`` when the key's other requests hold them all."""
        try:
            hold = await self._key.open_stream()
        except GatewayError as exc:
            raise StreamsTaken(exc.message) from None
        if hold is not None:
            self.held += 1
            return hold
        if not self.held:
            raise StreamsTaken(STREAMS_TAKEN)
        future: asyncio.Future[StreamHold] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            return await future  # handed over: ``held`` already counts it
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                await self.give_back(future.result())  # handed over as it was cancelled: pass it on
            elif future in self._waiters:
                self._waiters.remove(future)
            raise

    async def give_back(self, hold: StreamHold) -> None:
        """A sentence's request ended: its slot goes to the next sentence waiting, else to the key."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(hold)
                return
        self.held -= 1
        await hold.close()
