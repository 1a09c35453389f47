"""The HTTP server's own bounds: header size, time to send headers, open connections.

uvicorn's httptools protocol buffers a header of any size, waits forever for a client that
connects and sends nothing (or half a request line), and its ``limit_concurrency`` answers
with a plain-text 503 and lets WebSocket upgrades through. ``BoundedHttpTools`` adds, per
connection, before any of the app runs:

- ``max_header_bytes``: the request line and headers, counted as they arrive (so at most one
  read beyond the limit is ever buffered) -> 431, connection closed;
- ``header_timeout_s``: from connecting, or from a request's first byte on a kept-alive
  connection, to the end of its headers -> 408 (a silent close if it sent nothing);
- ``max_connections``: open connections (HTTP and WebSocket) or requests in progress on this
  replica -> 503 in the OpenAI envelope with ``Retry-After``, upgrades included.

Idle keep-alive connections are uvicorn's ``timeout_keep_alive``; a body that trickles is
bounded by the body-read deadline (``gateway.api.body``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.errors import GatewayError

log = logging.getLogger("higgs_gateway.http")

# Per header line: ": " and CRLF, as counted on the wire.
_HEADER_OVERHEAD = 4


def _refusal(error: GatewayError) -> bytes:
    body = orjson.dumps(error.envelope())
    head = [STATUS_LINE[error.status], b"content-type: application/json\r\n", b"connection: close\r\n"]
    head += [f"{name.lower()}: {value}\r\n".encode("latin-1") for name, value in error.headers.items()]
    head += [b"content-length: " + str(len(body)).encode() + b"\r\n", b"\r\n"]
    return b"".join(head) + body


def _too_large(limit: int) -> GatewayError:
    return GatewayError(431, f"The request line and headers exceed {limit} bytes.", code="header_fields_too_large")


def _too_slow(timeout_s: float) -> GatewayError:
    return GatewayError(408, f"The request headers did not arrive within {timeout_s:g} s.", code="request_timeout")


BUSY = GatewayError(
    503, "This gateway has too many open connections; retry shortly.", code="too_many_connections", headers={"Retry-After": "1"}
)


async def _busy(scope: Scope, receive: Receive, send: Send) -> None:
    """The app a request over the connection limit gets instead of the gateway's."""
    body = orjson.dumps(BUSY.envelope())
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"1"), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _HeadTooLarge(Exception):
    """Raised from a parser callback: stops the parse; ``send_400_response`` then says 431."""


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds above (set by ``bounded_http_protocol``)."""

    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0
    max_connections: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between a request's first byte (or the connection's start) and its headers' end
        self._head_begun = False  # a byte of this head has arrived
        self._head_bytes = 0  # exact: the URL and header lines parsed so far
        self._head_raw = 0  # reads that ended still inside the head: what the parser buffers
        self._head_too_large = False
        self._head_timer: asyncio.TimerHandle | None = None

    # Connection lifetime
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a client that connects and sends nothing is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        whole_read_in_head = self._in_head and self._head_begun
        super().data_received(data)
        if self._in_head and self._head_begun and not self.transport.is_closing():
            # A header still incomplete after this read: the parser holds it all, so count the
            # raw bytes now rather than when the header line ends (which may be never).
            self._head_raw += len(data) if whole_read_in_head else 0
            if max(self._head_raw, self._head_bytes) > self.max_header_bytes:
                self._refuse(_too_large(self.max_header_bytes))

    # Parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_begun, self._head_bytes, self._head_raw = True, True, 0, 0
        self._arm_head_timer()  # a no-op on the first request: its timer runs from connecting

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._count(len(name) + len(value) + _HEADER_OVERHEAD)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        if not self._over_connection_limit():
            super().on_headers_complete()
            return
        log.warning("refused a request: over server.max_connections (%s)", self.max_connections)
        app, self.app = self.app, _busy  # uvicorn starts ``self.app`` for this one request
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def handle_websocket_upgrade(self) -> None:
        if self._over_connection_limit():
            log.warning("refused a WebSocket upgrade: over server.max_connections (%s)", self.max_connections)
            self._refuse(BUSY)
            return
        super().handle_websocket_upgrade()

    def send_400_response(self, msg: str) -> None:
        if self._head_too_large:
            self._refuse(_too_large(self.max_header_bytes))
            return
        super().send_400_response(msg)

    # Helpers
    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_header_bytes:
            self._head_too_large = True
            raise _HeadTooLarge

    def _over_connection_limit(self) -> bool:
        limit = self.max_connections
        # ``connections`` holds this one too; ``tasks`` only the requests already running.
        return limit is not None and (len(self.connections) > limit or len(self.tasks) >= limit)

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        answering = self.cycle is not None and not self.cycle.response_complete
        if self._head_begun and not answering:
            self._refuse(_too_slow(self.header_timeout_s))
        else:
            # Nothing sent (a 408 could be read as the answer to a request sent just now), or
            # a pipelined head trickling behind a response still being written.
            self.transport.close()

    def _refuse(self, error: GatewayError) -> None:
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self.transport.write(_refusal(error))
            self.transport.close()


def bounded_http_protocol(
    max_header_bytes: int, header_timeout_s: float, max_connections: int | None
) -> type[BoundedHttpTools]:
    """The protocol class uvicorn instantiates per connection, with this config's bounds."""
    bounds = {"max_header_bytes": max_header_bytes, "header_timeout_s": header_timeout_s, "max_connections": max_connections}
    return type("BoundedHttpTools", (BoundedHttpTools,), bounds)
