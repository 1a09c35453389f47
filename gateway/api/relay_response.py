"""Stream a relayed body, and stop the moment the client goes away.

Starlette's ``StreamingResponse`` only notices a vanished client on ASGI 2.4 servers when
a ``send`` fails, which uvicorn does not do for a closed socket: the relay would keep
pulling audio from the worker, holding its batch slot, until the clip ended. One
``DisconnectWatch`` per request waits for ``http.disconnect`` and cancels whatever the
request task is doing at that moment (queued in admission, waiting for the worker's first
byte, or streaming); the cleanup in that code's ``finally`` releases the worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class ClientGone(Exception):
    """The client disconnected; the guarded work was cancelled."""


class StreamCut(Exception):
    """Raised out of a response whose upstream failed after bytes were sent: the server
    then drops the connection without the terminating chunk, so the client sees an
    incomplete stream rather than a clip that merely ends early. Expected and already
    counted, so ``quiet_stream_cuts`` keeps it out of the server's error log."""


def quiet_stream_cuts(record: logging.LogRecord) -> bool:
    """Logging filter for the server's error logger: drop the traceback of a StreamCut."""
    return not (record.exc_info and isinstance(record.exc_info[1], StreamCut))


class DisconnectWatch:
    """One task per request; costs nothing until the client leaves."""

    def __init__(self, receive: Receive) -> None:
        self.gone = False
        self._target: asyncio.Task[object] | None = None
        self._on_gone: Callable[[], None] | None = None
        self._task = asyncio.ensure_future(wait_for_disconnect(receive))
        self._task.add_done_callback(self._fire)

    def _fire(self, task: asyncio.Future[None]) -> None:
        if task.cancelled():
            return
        self.gone = True  # a disconnect, or a receive() that failed: either way nobody listens
        if self._on_gone is not None:
            self._on_gone()
        if self._target is not None:
            # Callbacks run only while the request task is suspended, so when a target is
            # set the task is parked at an await inside ``guard``: the cancel lands there.
            self._target.cancel()

    def guard(self, on_gone: Callable[[], None] | None = None) -> _Guard:
        """Inside, a disconnect cancels the current task and surfaces as ``ClientGone``."""
        return _Guard(self, on_gone)

    def close(self) -> None:
        self._task.cancel()


class _Guard:
    # A plain class rather than @contextmanager: this runs twice per request on the hot path.
    __slots__ = ("_watch", "_on_gone", "_target")

    def __init__(self, watch: DisconnectWatch, on_gone: Callable[[], None] | None) -> None:
        self._watch = watch
        self._on_gone = on_gone
        self._target: asyncio.Task[object] | None = None

    def __enter__(self) -> None:
        watch = self._watch
        if watch.gone:
            raise ClientGone
        self._target = asyncio.current_task()
        watch._target, watch._on_gone = self._target, self._on_gone

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        watch = self._watch
        watch._target, watch._on_gone = None, None
        if kind is asyncio.CancelledError and watch.gone and self._target is not None:
            # Ours only if the client left and nobody else (server shutdown) also cancelled.
            if self._target.uncancel() == 0:
                raise ClientGone from None


class RelayResponse(Response):
    """Sends ``body`` chunk by chunk; a Response subclass so the framework sends it as it is.

    ``on_disconnect`` runs the moment the client is seen gone; ``on_close`` runs once the
    response is over, whatever way it ended (the request's one cleanup).
    """

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        headers: list[tuple[bytes, bytes]],
        watch: DisconnectWatch,
        on_disconnect: Callable[[], None],
        on_close: Callable[[], Awaitable[None]],
        status: int = 200,
    ) -> None:
        self._body = body
        self._watch = watch
        self._on_disconnect = on_disconnect
        self._on_close = on_close
        self.status_code = status
        self.raw_headers = headers
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            with self._watch.guard(self._on_disconnect):
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                async for chunk in self._body:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except ClientGone:
            pass
        finally:
            self._watch.close()
            try:
                # A body suspended at ``yield`` when the send was cancelled is closed here.
                await self._body.aclose()
            finally:
                await self._on_close()


async def wait_for_disconnect(receive: Receive) -> None:
    """Returns when the client closes the connection (the request body was read already)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
