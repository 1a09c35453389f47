"""Transports, lease, disconnect watch, load reporter and health checker, without sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from gateway.api.relay_response import ClientGone, DisconnectWatch
from gateway.config import HealthConfig, LoadReportConfig, UpstreamConfig
from gateway.pools.health import HealthChecker
from gateway.pools.load_reports import LoadReporter
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.upstream.errors import UpstreamError
from gateway.upstream.transport import HttpxTransport, _AiohttpResponse
from tests.unit.upstream.fakes import ready_fleet


# ---- httpx transport over httpx.MockTransport ------------------------------------------
class _Breaking(httpx.AsyncByteStream):
    def __init__(self, error: Exception | None) -> None:
        self._error = error

    async def __aiter__(self) -> Any:
        yield b"\x01\x02"
        if self._error is not None:
            raise self._error


async def test_httpx_transport_streams_and_names_each_failure() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down.test":
            raise httpx.ConnectError("refused", request=request)
        if request.url.host == "silent.test":
            return httpx.Response(200, stream=_Breaking(httpx.ReadTimeout("silent", request=request)))
        if request.url.host == "cut.test":
            return httpx.Response(200, stream=_Breaking(httpx.RemoteProtocolError("reset", request=request)))
        return httpx.Response(200, stream=_Breaking(None))

    transport = HttpxTransport(UpstreamConfig(transport="httpx"), transport=httpx.MockTransport(answer))
    ok = await transport.post_stream("http://ok.test/v1/audio/speech", {"input": "x"})
    assert ok.status == 200 and b"".join([c async for c in ok.chunks()]) == b"\x01\x02"
    with pytest.raises(UpstreamError) as refused:
        await transport.post_stream("http://down.test/v1/audio/speech", {})
    assert refused.value.kind is UpstreamErrorKind.CONNECT
    for host, kind in (("silent.test", UpstreamErrorKind.READ_TIMEOUT), ("cut.test", UpstreamErrorKind.STREAM_ERROR)):
        response = await transport.post_stream(f"http://{host}/v1/audio/speech", {})
        with pytest.raises(UpstreamError) as broken:
            _ = [c async for c in response.chunks()]
        assert broken.value.kind is kind
        await response.close()
    await transport.close()


# ---- aiohttp response wrapper over a fake aiohttp response -------------------------------
class _FakeContent:
    """aiohttp's StreamReader as the wrapper reads it: ``readany`` until b"" (the end)."""

    def __init__(self, error: Exception | None) -> None:
        self._error = error
        self._sent = False

    async def readany(self) -> bytes:
        if not self._sent:
            self._sent = True
            return b"\x01\x02"
        if self._error is not None:
            raise self._error
        return b""


class _FakeAiohttpResponse:
    def __init__(self, error: Exception | None = None) -> None:
        self.status = 200
        self.content = _FakeContent(error)
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "error, kind",
    [
        (aiohttp.ServerTimeoutError("silent"), UpstreamErrorKind.READ_TIMEOUT),
        (aiohttp.ClientPayloadError("truncated"), UpstreamErrorKind.STREAM_ERROR),
        (aiohttp.ServerDisconnectedError(), UpstreamErrorKind.STREAM_ERROR),
    ],
)
async def test_aiohttp_stream_failures_are_declared_kinds(error: Exception, kind: UpstreamErrorKind) -> None:
    fake = _FakeAiohttpResponse(error)
    response = _AiohttpResponse(fake)  # type: ignore[arg-type]
    received: list[bytes] = []
    with pytest.raises(UpstreamError) as caught:
        async for chunk in response.chunks():
            received.append(chunk)
    assert received == [b"\x01\x02"] and caught.value.kind is kind
    await response.close()
    assert fake.closed  # close(), not release(): the worker must see the disconnect


async def test_an_aiohttp_stream_ends_at_its_empty_read() -> None:
    response = _AiohttpResponse(_FakeAiohttpResponse())  # type: ignore[arg-type]
    assert [chunk async for chunk in response.chunks()] == [b"\x01\x02"]


# ---- lease -------------------------------------------------------------------------------
async def test_a_lease_goes_down_exactly_once(tmp_path: Path) -> None:
    fleet, admission = ready_fleet(tmp_path)
    woken: list[int] = []
    fleet.events.on_slot_freed(lambda: woken.append(1))
    lease = fleet.leases.lease("ll-0")
    assert fleet.members.get("ll-0").inflight == 1
    lease.release()
    lease.release()
    assert fleet.members.get("ll-0").inflight == 0 and lease.released and woken == [1]


# ---- disconnect watch ----------------------------------------------------------------------
def _receive_queue() -> tuple[asyncio.Queue[dict[str, Any]], Any]:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    return queue, queue.get


async def test_a_disconnect_cancels_the_guarded_wait_as_client_gone() -> None:
    queue, receive = _receive_queue()
    watch = DisconnectWatch(receive)
    gone: list[bool] = []

    async def guarded() -> None:
        with watch.guard(lambda: gone.append(True)):
            await asyncio.Event().wait()

    task = asyncio.ensure_future(guarded())
    await asyncio.sleep(0)
    queue.put_nowait({"type": "http.disconnect"})
    with pytest.raises(ClientGone):
        await task
    assert gone == [True] and watch.gone
    with pytest.raises(ClientGone), watch.guard():
        pass  # already gone: refused at the door
    watch.close()


async def test_a_closed_watch_never_fires() -> None:
    queue, receive = _receive_queue()
    watch = DisconnectWatch(receive)
    watch.close()
    await asyncio.sleep(0)
    queue.put_nowait({"type": "http.disconnect"})
    await asyncio.sleep(0)
    assert not watch.gone


# ---- load reporter and health checker over httpx.MockTransport ------------------------------
async def test_load_reports_fall_back_to_metrics_and_fail_open(tmp_path: Path) -> None:
    fleet, _ = ready_fleet(tmp_path)

    def answer(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host == "ll-0.test" and request.url.path == "/load":
            return httpx.Response(200, json={"server_load": 3})
        if host == "ll-1.test" and request.url.path == "/metrics":
            return httpx.Response(200, text='vllm_omni:num_requests_running{m="x"} 2\nvllm_omni:num_requests_waiting 1\n')
        return httpx.Response(404)

    reporter = LoadReporter(fleet.view, httpx.AsyncClient(transport=httpx.MockTransport(answer)), LoadReportConfig(), clock=lambda: 100.0)
    assert await reporter.poll(fleet.members.get("ll-0")) == 3
    assert await reporter.poll(fleet.members.get("ll-1")) == 3
    assert await reporter.poll(fleet.members.get("ht-0")) is None
    assert fleet.members.get("ll-0").reported_load == 3 and fleet.members.get("ht-0").reported_load is None


async def test_health_probes_report_to_the_fleet_and_stop_cleanly(tmp_path: Path) -> None:
    fleet, _ = ready_fleet(tmp_path)
    release = asyncio.Event()

    async def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "ll-0.test":
            return httpx.Response(200)
        if request.url.host == "ll-1.test":
            return httpx.Response(500)
        await release.wait()  # ht-0 hangs until stop cancels the probe
        return httpx.Response(200)

    checker = HealthChecker(fleet.view, fleet.health, httpx.AsyncClient(transport=httpx.MockTransport(answer)), HealthConfig())
    assert await checker.probe_once(fleet.members.get("ll-0"))
    assert not await checker.probe_once(fleet.members.get("ll-1"))
    assert fleet.members.get("ll-1").consecutive_failures == 1 and "500" in (fleet.members.get("ll-1").last_error or "")
    checker.start()
    for _ in range(20):
        await asyncio.sleep(0)
    assert checker._probes  # the hanging probe is tracked
    await checker.stop()
    assert not checker._probes and not release.is_set()
