"""The session's socket as the session uses it, and the one way anything is sent on it.

The receive loop (answers, errors) and the delivery task (audio) both send; ``Outbox``
sends one whole message at a time, so frames never interleave, and turns a failed send
(the client is gone) into ``SocketClosed``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from gateway.sessions.messages import encode


class SessionSocket(Protocol):
    async def receive(self) -> str | bytes | None:
        """The next frame; None once the client has gone (close frame or dropped connection)."""
        ...

    async def send_text(self, text: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int) -> None: ...


class SocketClosed(Exception):
    """A send failed: the client is gone."""


class Outbox:
    def __init__(self, socket: SessionSocket) -> None:
        self._socket = socket
        self._lock = asyncio.Lock()
        self.closed = False

    async def send_json(self, message: dict[str, Any]) -> None:
        await self._send(self._socket.send_text, encode(message))

    async def send_bytes(self, data: bytes) -> None:
        await self._send(self._socket.send_bytes, data)

    async def close(self, code: int) -> None:
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                await self._socket.close(code)
            except Exception:  # already gone: nothing to close
                pass

    async def _send(self, send: Any, data: Any) -> None:
        async with self._lock:
            if self.closed:
                raise SocketClosed
            try:
                await send(data)
            except Exception as exc:
                self.closed = True
                raise SocketClosed from exc
