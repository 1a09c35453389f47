"""The relay's HTTP/1.1 client against a scripted worker on a loopback socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from gateway.config import UpstreamConfig
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.upstream.errors import UpstreamError
from gateway.upstream.http1 import Http1Client
from gateway.upstream.transport import AiohttpTransport, Http1Transport, HttpxTransport, create_transport


@dataclass
class Worker:
    """Answers by path: /stream (chunked, 3 chunks), /error (422 with a body), /silent
    (never answers), /stall (one chunk, then silence), /cut (one chunk, then closes)."""

    url: str = ""
    connections: int = 0
    requests: list[tuple[bytes, dict[bytes, bytes], bytes]] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower().encode(): v.strip().encode() for k, v in (x.split(":", 1) for x in lines if x)}
                body = await reader.readexactly(int(headers[b"content-length"]))
                path = line.split()[1].encode()
                self.requests.append((path, headers, body))
                if path == b"/stream":
                    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                    for chunk in (b"ab", b"cd", b"ef"):
                        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    writer.write(b"0\r\n\r\n")
                elif path == b"/hold":  # one chunk, the rest once released
                    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n")
                    await writer.drain()
                    await self.release.wait()
                    writer.write(b"0\r\n\r\n")
                elif path == b"/error":
                    writer.write(b"HTTP/1.1 422 Unprocessable\r\ncontent-length: 7\r\n\r\nno good")
                elif path == b"/silent":
                    await reader.read()  # until the client hangs up
                    return
                elif path in (b"/stall", b"/cut"):
                    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n")
                    await writer.drain()
                    if path == b"/cut":
                        writer.close()
                        return
                    await reader.read()
                    return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.set()
            writer.close()


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    scripted = Worker()
    server = await asyncio.start_server(scripted.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    scripted.url = f"http://127.0.0.1:{port}"
    yield scripted
    server.close()


def client(max_connections: int = 8, read_timeout_s: float = 5.0) -> Http1Client:
    return Http1Client(max_connections, connect_timeout_s=2.0, read_timeout_s=read_timeout_s, idle_s=3.0)


async def drain(response: object) -> bytes:
    return b"".join([chunk async for chunk in response.chunks()])  # type: ignore[attr-defined]


async def test_streams_a_chunked_answer_and_reuses_the_connection(worker: Worker) -> None:
    http = client()
    for request_id in ("r1", "r2"):
        response = await http.post(worker.url + "/stream", b'{"input":"hi"}', {"x-request-id": request_id})
        assert response.status == 200
        assert await drain(response) == b"abcdef"
        await response.close()
    assert worker.connections == 1  # kept alive, used twice
    path, headers, body = worker.requests[1]
    assert (path, body) == (b"/stream", b'{"input":"hi"}')
    assert headers[b"x-request-id"] == b"r2" and headers[b"content-type"] == b"application/json"
    assert headers[b"host"] == worker.url.removeprefix("http://").encode()
    await http.close()


async def test_reads_an_error_answer_whole(worker: Worker) -> None:
    http = client()
    response = await http.post(worker.url + "/error", b"{}", {})
    assert response.status == 422 and await response.read() == b"no good"
    await response.close()
    await http.close()


async def test_a_half_read_answer_drops_its_connection(worker: Worker) -> None:
    http = client()
    response = await http.post(worker.url + "/stall", b"{}", {})
    assert await anext(response.chunks()) == b"ab"
    await response.close()
    await asyncio.wait_for(worker.closed.wait(), 5)  # the worker sees the disconnect
    response = await http.post(worker.url + "/stream", b"{}", {})
    assert await drain(response) == b"abcdef"
    assert worker.connections == 2
    await http.close()


async def test_names_each_failure(worker: Worker) -> None:
    http = client(read_timeout_s=0.05)
    with pytest.raises(UpstreamError) as silent:
        await http.post(worker.url + "/silent", b"{}", {})
    assert silent.value.kind is UpstreamErrorKind.READ_TIMEOUT
    for path, kind in (("/stall", UpstreamErrorKind.READ_TIMEOUT), ("/cut", UpstreamErrorKind.STREAM_ERROR)):
        response = await http.post(worker.url + path, b"{}", {})
        with pytest.raises(UpstreamError) as broken:
            await drain(response)
        assert broken.value.kind is kind, path
        await response.close()
    with pytest.raises(UpstreamError) as injected:
        await http.post(worker.url + "/stream", b"{}", {"x-request-id": "a\r\nx-evil: 1"})
    assert injected.value.kind is UpstreamErrorKind.CONNECT
    await http.close()


async def test_a_refused_connection_is_a_connect_failure() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    http = client()
    with pytest.raises(UpstreamError) as refused:
        await http.post(f"http://127.0.0.1:{port}/stream", b"{}", {})
    assert refused.value.kind is UpstreamErrorKind.CONNECT
    with pytest.raises(UpstreamError) as not_http:
        await http.post("https://127.0.0.1/stream", b"{}", {})
    assert not_http.value.kind is UpstreamErrorKind.CONNECT
    await http.close()


async def test_a_request_past_max_connections_waits_for_one_to_free(worker: Worker) -> None:
    http = client(max_connections=1)
    first = await http.post(worker.url + "/hold", b"{}", {})
    second = asyncio.ensure_future(http.post(worker.url + "/stream", b"{}", {}))
    await asyncio.sleep(0)
    assert not second.done() and worker.connections == 1
    worker.release.set()
    assert await drain(first) == b"ab"  # read to the end: the connection goes back to the pool
    assert await drain(await second) == b"abcdef"
    assert worker.connections == 1
    await http.close()


def test_http1_is_the_default_and_the_others_are_chosen_by_name() -> None:
    assert isinstance(create_transport(UpstreamConfig()), Http1Transport)
    assert isinstance(create_transport(UpstreamConfig(transport="aiohttp")), AiohttpTransport)
    assert isinstance(create_transport(UpstreamConfig(transport="httpx")), HttpxTransport)
