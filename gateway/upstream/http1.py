"""The relay's own HTTP/1.1 client: one request shape (POST JSON, stream the answer), kept lean.

A general client pays per request for what the relay never uses: URL parsing, header
multidicts, cookie jars, redirects, hooks and three layers of response objects. On a small
box that was a quarter of the gateway's CPU per streamed request. This client writes the
request in one buffer, parses the answer with httptools (the server's own C parser) in
the connection's protocol, and hands body chunks to the reader as they arrive.

Connections are kept alive per worker address and reused newest first; one idle for
``idle_s`` or longer is not reused (before the worker's own keep-alive closes it), and one
whose answer was not read to the end is closed (the worker then aborts the request).
``max_connections`` bounds open connections; a request past it waits for one to free.
``read_timeout_s`` bounds the silence before the answer's head and between two chunks.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Mapping
from urllib.parse import urlsplit

import httptools

from gateway.types.error_kinds import UpstreamErrorKind
from gateway.upstream.errors import UpstreamError

# Body bytes buffered per connection before reading from the socket pauses.
HIGH_WATER = 256 * 1024


class _Connection(asyncio.Protocol):
    """One TCP connection to a worker and the answer arriving on it."""

    def __init__(self, pool: Http1Client, key: tuple[str, int]) -> None:
        self._pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._loop = asyncio.get_running_loop()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[bool] | None = None
        self._head = False  # the answer's status line and headers are in
        self._complete = False  # the whole answer is in
        self._framed = False  # its length is known (Content-Length or chunked)
        self._error: UpstreamError | None = None
        self.closed = False
        self.reusable = False
        self.idle_since = 0.0
        self.status = 0

    # ---- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamErrorKind.STREAM_ERROR, f"malformed answer: {exc}")
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self._complete:
            if self._head and not self._framed:
                self._complete = True  # an answer delimited by the connection's end
            elif self._head:
                self._fail(UpstreamErrorKind.STREAM_ERROR, "the worker closed the connection mid-answer")
            else:
                self._fail(UpstreamErrorKind.CONNECT, "the worker closed the connection before answering")
        self._wake()
        self._pool._forget(self)

    # ---- httptools callbacks -------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-length" or (lowered == b"transfer-encoding" and b"chunked" in value.lower()):
            self._framed = True

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._head = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._complete = True
        self.reusable = self._parser.should_keep_alive()
        self._wake()

    # ---- the request ---------------------------------------------------------------
    def begin(self, request: bytes) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._head = self._complete = self._framed = self.reusable = False
        self._chunks.clear()
        self._buffered, self.status, self._error = 0, 0, None
        assert self.transport is not None
        self.transport.write(request)

    async def head(self, timeout_s: float | None) -> None:
        while not self._head:
            await self._wait(timeout_s, "the worker sent no answer in time")

    async def chunk(self, timeout_s: float | None) -> bytes:
        """The next body bytes; b"" once the answer is complete (then released or closed)."""
        while not self._chunks:
            if self._complete:
                self._pool._release(self)
                return b""
            await self._wait(timeout_s, "the worker went silent mid-stream")
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    async def _wait(self, timeout_s: float | None, silent: str) -> None:
        if self._error is not None:
            raise self._error
        if self.closed:
            raise UpstreamError(UpstreamErrorKind.STREAM_ERROR, "the connection closed")
        waiter = self._waiter = self._loop.create_future()
        timer = None if timeout_s is None else self._loop.call_later(timeout_s, _time_out, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        if waiter.result() is False:
            raise UpstreamError(UpstreamErrorKind.READ_TIMEOUT, silent)
        if self._error is not None:
            raise self._error

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _fail(self, kind: UpstreamErrorKind, detail: str) -> None:
        if self._error is None:
            self._error = UpstreamError(kind, detail)

    def abort(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True
        self._pool._forget(self)


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class Http1Response:
    """One streamed answer: its status, then its body, then ``close``."""

    __slots__ = ("_connection", "_read_timeout_s", "status", "_done")

    def __init__(self, connection: _Connection, read_timeout_s: float | None) -> None:
        self._connection = connection
        self._read_timeout_s = read_timeout_s
        self.status = connection.status
        self._done = False

    def chunks(self) -> Http1Response:
        return self

    def __aiter__(self) -> Http1Response:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        chunk = await self._connection.chunk(self._read_timeout_s)
        if not chunk:
            self._done = True
            raise StopAsyncIteration
        return chunk

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self])

    async def close(self) -> None:
        if not self._done:
            self._done = True
            self._connection.abort()  # a half-read answer: the worker must see the disconnect


class Http1Client:
    def __init__(
        self,
        max_connections: int,
        connect_timeout_s: float | None,
        read_timeout_s: float | None,
        idle_s: float,
    ) -> None:
        self._max_connections = max_connections
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._idle_s = idle_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._connecting = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._targets: dict[str, tuple[tuple[str, int], bytes]] = {}
        self._closed = False

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Http1Response:
        """Send ``body`` as JSON; the answer once its head is in (raises ``UpstreamError``)."""
        key, start = self._target(url)
        request = b"".join((start, _header_block(headers), b"content-length: %d\r\n\r\n" % len(body), body))
        connection = await self._acquire(key)
        try:
            connection.begin(request)
            await connection.head(self._read_timeout_s)
        except BaseException:
            connection.abort()
            raise
        return Http1Response(connection, self._read_timeout_s)

    async def close(self) -> None:
        self._closed = True
        for connection in list(self._open):
            connection.abort()
        self._idle.clear()

    # ---- connections ---------------------------------------------------------------
    def _target(self, url: str) -> tuple[tuple[str, int], bytes]:
        known = self._targets.get(url)
        if known is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise UpstreamError(UpstreamErrorKind.CONNECT, f"not an http:// address: {url!r}")
            port = parts.port or 80
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc.rsplit("@", 1)[-1]
            start = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n".encode("latin-1")
            if len(self._targets) >= 1024:
                self._targets.clear()  # addresses churned (discovery): start over
            known = self._targets[url] = ((parts.hostname, port), start)
        return known

    async def _acquire(self, key: tuple[str, int]) -> _Connection:
        if self._closed:
            raise UpstreamError(UpstreamErrorKind.CONNECT, "the client is closed")
        idle = self._idle.get(key)
        now = asyncio.get_running_loop().time()
        while idle:
            connection = idle.pop()  # the newest: the least likely to be closing
            if not connection.closed and now - connection.idle_since < self._idle_s:
                return connection
            connection.abort()
        while len(self._open) + self._connecting >= self._max_connections:
            if not self._drop_idle():
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                except BaseException:
                    self._wake_one()  # a place handed to this request passes on
                    raise
                return await self._acquire(key)
        self._connecting += 1
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, connection = await asyncio.get_running_loop().create_connection(
                    lambda: _Connection(self, key), key[0], key[1]
                )
        except TimeoutError as exc:
            raise UpstreamError(UpstreamErrorKind.CONNECT, f"connecting to {key[0]}:{key[1]} timed out") from exc
        except OSError as exc:
            raise UpstreamError(UpstreamErrorKind.CONNECT, str(exc) or type(exc).__name__) from exc
        finally:
            self._connecting -= 1
        self._open.add(connection)
        return connection

    def _drop_idle(self) -> bool:
        """Close one idle connection (to any address) to make room; False when none is idle."""
        for idle in self._idle.values():
            if idle:
                idle.pop(0).abort()
                return True
        return False

    def _release(self, connection: _Connection) -> None:
        if not connection.reusable or connection.closed or self._closed:
            connection.abort()
            return
        connection.idle_since = asyncio.get_running_loop().time()
        self._idle.setdefault(connection.key, []).append(connection)
        self._wake_one()

    def _forget(self, connection: _Connection) -> None:
        if connection in self._open:
            self._open.discard(connection)
            idle = self._idle.get(connection.key)
            if idle and connection in idle:
                idle.remove(connection)
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


def _header_block(headers: Mapping[str, str]) -> bytes:
    lines = []
    for name, value in headers.items():
        if name.lower() in ("content-type", "content-length", "host"):
            continue  # the client's own
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise UpstreamError(UpstreamErrorKind.CONNECT, f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError as exc:
        raise UpstreamError(UpstreamErrorKind.CONNECT, "a header is not latin-1") from exc
