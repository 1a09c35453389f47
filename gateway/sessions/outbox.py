"""The session's socket as the session uses it, and the one way anything is sent on it.

The receive loop (answers, errors) and the delivery task (audio) both send; ``Outbox``
sends one whole message at a time, so frames never interleave, and turns a failed send
(the client is gone) into ``SocketClosed``.

A send waits while the client's TCP window is full (the server's flow control): the
outbox is then ``blocked``, which pauses the session's dispatch. A send that waits longer
than ``send_timeout_s`` means a client that stopped reading: the outbox is ``stalled``,
takes no more sends, and ``on_stall`` tells the session to end (its slots are freed then).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from gateway.sessions.messages import encode

DEFAULT_SEND_TIMEOUT_S = 10.0


class SessionSocket(Protocol):
    async def receive(self) -> str | bytes | None:
        """The next frame; None once the client has gone (close frame or dropped connection)."""
        ...

    async def send_text(self, text: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int, reason: str = "") -> None: ...


class SocketClosed(Exception):
    """A send failed: the client is gone (or stopped reading)."""


class Outbox:
    def __init__(self, socket: SessionSocket, send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S) -> None:
        self._socket = socket
        self._send_timeout_s = send_timeout_s
        self._lock = asyncio.Lock()
        self.closed = False  # no more sends
        self._close_sent = False
        self.blocked = False  # a send is waiting for the client to read
        self.stalled = False  # a send waited past send_timeout_s: the client stopped reading
        self.on_stall: Callable[[], None] = lambda: None

    async def send_json(self, message: dict[str, Any]) -> None:
        await self._send(self._socket.send_text, encode(message))

    async def send_bytes(self, data: bytes) -> None:
        await self._send(self._socket.send_bytes, data)

    async def close(self, code: int, reason: str = "") -> None:
        """Close once; bounded, since a client that does not read may never take the close frame."""
        async with self._lock:
            if self._close_sent:
                return
            self.closed = self._close_sent = True
            with contextlib.suppress(Exception):  # already gone, or not reading: nothing to wait for
                async with asyncio.timeout(self._send_timeout_s):
                    await self._socket.close(code, reason)

    async def _send(self, send: Any, data: Any) -> None:
        async with self._lock:
            if self.closed:
                raise SocketClosed
            self.blocked = True
            try:
                async with asyncio.timeout(self._send_timeout_s):
                    await send(data)
            except TimeoutError:
                self.closed = self.stalled = True
                self.on_stall()
                raise SocketClosed from None
            except Exception as exc:
                self.closed = True
                raise SocketClosed from exc
            finally:
                self.blocked = False
