"""An ASGI streaming response that stops the moment the client goes away.

Starlette's ``StreamingResponse`` only notices a vanished client on ASGI 2.4 servers when
a ``send`` fails, which uvicorn does not do for a closed socket: the relay would keep
pulling audio from the worker, holding its batch slot, until the clip ended. Here the
body is streamed in one task and ``http.disconnect`` awaited in another; whichever ends
first cancels the other, and the body's own ``finally`` releases the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class RelayResponse(Response):
    # A Response subclass so the framework sends it as it is instead of serialising it.
    def __init__(
        self,
        body: AsyncIterator[bytes],
        headers: list[tuple[bytes, bytes]],
        on_disconnect: Callable[[], None],
        status: int = 200,
    ) -> None:
        self._body = body
        self._headers = headers
        self._on_disconnect = on_disconnect
        self._status = status
        self.status_code = status
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.ensure_future(self._stream(send))
        watching = asyncio.ensure_future(wait_for_disconnect(receive))
        try:
            await asyncio.wait((streaming, watching), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not streaming.done():
                # The client left (or our own task was cancelled): stop relaying now.
                self._on_disconnect()
                streaming.cancel()
            watching.cancel()
            await asyncio.gather(streaming, watching, return_exceptions=True)
            # A body suspended at ``yield`` when its consumer was cancelled only runs its
            # ``finally`` (lease release, upstream close) when closed explicitly.
            aclose = getattr(self._body, "aclose", None)
            if aclose is not None:
                await aclose()
        # Re-raise a body failure so the server aborts the connection (a cut stream).
        if not streaming.cancelled() and streaming.exception() is not None:
            raise streaming.exception()  # type: ignore[misc]

    async def _stream(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self._status, "headers": self._headers})
        self.raw_headers = self._headers
        async for chunk in self._body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns when the client closes the connection (the request body was read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
