"""The HTTP client that carries audio from workers: one shared pool, three implementations.

On a 2-core box the upstream client dominates the gateway's CPU per streamed request
(httpx's default transport costs several times aiohttp's, and aiohttp's general client
much more than ``gateway.upstream.http1``, the default), so the relay talks to this small
interface and the config picks the implementation (``upstream.transport``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import aiohttp
import httpx
import orjson
from aiohttp.streams import EofStream

from gateway.config import UpstreamConfig
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.upstream.errors import UpstreamError
from gateway.upstream.http1 import Http1Client

JSON_HEADERS = {"content-type": "application/json"}


class UpstreamResponse(Protocol):
    status: int

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    async def close(self) -> None: ...


class UpstreamTransport(Protocol):
    async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] = ...) -> UpstreamResponse:
        """POST ``body`` as JSON with ``headers`` (x-request-id, traceparent) besides its own."""
        ...

    async def close(self) -> None: ...


# ---- aiohttp: the cheapest per streamed request in our measurements --------------------
class _AiohttpChunks:
    """The body as it arrives, one read of whatever is buffered per step. A plain async
    iterator rather than an async generator wrapped around ``iter_any()``: one frame per
    chunk instead of three, and no async-generator bookkeeping on the event loop."""

    __slots__ = ("_read",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._read = response.content.readany

    def __aiter__(self) -> _AiohttpChunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._read()
        except EofStream:
            raise StopAsyncIteration from None
        except aiohttp.ServerTimeoutError as exc:
            raise UpstreamError(UpstreamErrorKind.READ_TIMEOUT, "the worker went silent mid-stream") from exc
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            raise UpstreamError(UpstreamErrorKind.STREAM_ERROR, str(exc) or type(exc).__name__) from exc
        if not chunk:
            raise StopAsyncIteration
        return chunk


class _AiohttpResponse:
    __slots__ = ("_response", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    def chunks(self) -> AsyncIterator[bytes]:
        return _AiohttpChunks(self._response)

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except aiohttp.ServerTimeoutError as exc:
            raise UpstreamError(UpstreamErrorKind.READ_TIMEOUT, "the worker went silent") from exc
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            raise UpstreamError(UpstreamErrorKind.STREAM_ERROR, str(exc) or type(exc).__name__) from exc

    async def close(self) -> None:
        # close(), not release(): a half-read stream must drop the connection so the
        # worker sees the disconnect and aborts the request in its engine.
        self._response.close()


UPSTREAM_IDLE_S = 3.0
SKIPPED_AUTO_HEADERS = ("User-Agent", "Accept-Encoding")


class AiohttpTransport:
    def __init__(self, config: UpstreamConfig) -> None:
        self._config = config
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Idle connections are dropped before the worker's own keep-alive (uvicorn's 5 s,
            # vLLM's default too) closes them: reusing one the worker is closing at that
            # instant fails the request with a reset (the soak saw it as 502s).
            connector = aiohttp.TCPConnector(
                limit=self._config.max_connections, limit_per_host=0, ttl_dns_cache=60,
                keepalive_timeout=UPSTREAM_IDLE_S,
            )  # fmt: skip
            # sock_read bounds the silence between two chunks inside aiohttp, instead of a
            # timeout context around every chunk read in the relay loop.
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self._config.connect_timeout_s, sock_read=self._config.read_timeout_s
            )
            # No cookie jar (workers set no cookies; a jar is read and written on every
            # request), and none of the headers aiohttp adds unasked: the relay asks for no
            # compression and names no client.
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, auto_decompress=False, json_serialize=lambda o: orjson.dumps(o).decode(),
                cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=SKIPPED_AUTO_HEADERS,
            )
        return self._session

    async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] = JSON_HEADERS) -> UpstreamResponse:
        try:
            response = await self._get_session().post(url, data=orjson.dumps(body), headers={**headers, **JSON_HEADERS})
        except aiohttp.SocketTimeoutError as exc:  # connected, but no answer within read_timeout_s
            raise UpstreamError(UpstreamErrorKind.READ_TIMEOUT, "the worker sent no answer in time") from exc
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamError(UpstreamErrorKind.CONNECT, str(exc)) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(UpstreamErrorKind.CONNECT, str(exc) or type(exc).__name__) from exc
        return _AiohttpResponse(response)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


# ---- http1: the relay's own client, the leanest per streamed request --------------------
def http1_client(config: UpstreamConfig) -> Http1Client:
    """The relay's own HTTP/1.1 client with ``config``'s bounds (the transport's, and the relay floor's)."""
    return Http1Client(config.max_connections, config.connect_timeout_s, config.read_timeout_s, UPSTREAM_IDLE_S)


class Http1Transport:
    def __init__(self, config: UpstreamConfig) -> None:
        self._client = http1_client(config)

    async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] = JSON_HEADERS) -> UpstreamResponse:
        return await self._client.post(url, orjson.dumps(body), headers)

    async def close(self) -> None:
        await self._client.close()


# ---- httpx: kept for comparison and for environments that standardise on it --------------
class _HttpxResponse:
    __slots__ = ("_response", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.ReadTimeout as exc:
            raise UpstreamError(UpstreamErrorKind.READ_TIMEOUT, "the worker went silent mid-stream") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(UpstreamErrorKind.STREAM_ERROR, str(exc) or type(exc).__name__) from exc

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise UpstreamError(UpstreamErrorKind.STREAM_ERROR, str(exc) or type(exc).__name__) from exc

    async def close(self) -> None:
        await self._response.aclose()


class HttpxTransport:
    def __init__(self, config: UpstreamConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        limits = httpx.Limits(
            max_connections=config.max_connections, max_keepalive_connections=config.max_connections,
            keepalive_expiry=UPSTREAM_IDLE_S,  # below the worker's keep-alive, as above
        )  # fmt: skip
        timeout = httpx.Timeout(connect=config.connect_timeout_s, read=config.read_timeout_s, write=None, pool=None)
        # ``transport``: tests pass httpx.MockTransport here (no sockets).
        self._client = httpx.AsyncClient(limits=limits, timeout=timeout, transport=transport)

    async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] = JSON_HEADERS) -> UpstreamResponse:
        request = self._client.build_request("POST", url, content=orjson.dumps(body), headers={**headers, **JSON_HEADERS})
        try:
            response = await self._client.send(request, stream=True)
        except httpx.ReadTimeout as exc:  # connected, but no answer within read_timeout_s
            raise UpstreamError(UpstreamErrorKind.READ_TIMEOUT, "the worker sent no answer in time") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamError(UpstreamErrorKind.CONNECT, str(exc) or "timeout") from exc
        except httpx.HTTPError as exc:
            raise UpstreamError(UpstreamErrorKind.CONNECT, str(exc) or type(exc).__name__) from exc
        return _HttpxResponse(response)

    async def close(self) -> None:
        await self._client.aclose()


def create_transport(config: UpstreamConfig) -> UpstreamTransport:
    if config.transport == "http1":
        return Http1Transport(config)
    return AiohttpTransport(config) if config.transport == "aiohttp" else HttpxTransport(config)
