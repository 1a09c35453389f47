"""The speech pipeline's branches, over the fake worker transport (no process, no socket):
the client leaving before the first byte (499), an encoder that cannot be opened, a
worker failing mid-stream under SSE, and a retry on another worker before the first byte.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from gateway.access_log import AccessLog
from gateway.api.access import ApiKeyGate
from gateway.api.entry import Entry, EntryPath
from gateway.api.fast_path import SpeechEntry
from gateway.api.speech import EncoderFactory, SpeechPipeline
from gateway.audio.encoder import StreamEncoder
from gateway.audio.factory import open_encoder
from gateway.audio.formats import AudioFormat
from gateway.config import load_config
from gateway.metrics import GatewayMetrics
from gateway.recorder import Recorder
from gateway.security.auth import ApiKeyAuth
from gateway.security.ref_audio import RefAudioPolicy
from gateway.types import SPEECH_PATH
from gateway.upstream.call import Upstream
from gateway.upstream.events import HealthReports
from gateway.upstream.relay import Relay
from gateway.voices.store import VoiceStore
from gateway.worker_payload import WorkerPayloads
from tests.unit.upstream.fakes import (
    AWAITS_BEFORE_AUDIO, HANG, FakeResponse, FakeTransport, FaultyTransport, cut, failing_then_serving, ready_fleet,
)

PCM = b"\x01\x00" * 960  # one 40 ms frame
BODY = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}


class Gateway:
    """The speech route alone: the real pipeline, admission, relay and recorder."""

    def __init__(self, tmp_path: Path, transport: Any, encoders: EncoderFactory = open_encoder) -> None:
        config = load_config(overrides={"data_dir": str(tmp_path)})
        self.fleet, admission = ready_fleet(tmp_path)
        self.transport = transport
        self.recorder = Recorder(GatewayMetrics(), AccessLog(enabled=False))
        relay = Relay(transport, (HealthReports(self.fleet.health), self.recorder), admission, config.upstream)
        pipeline = SpeechPipeline(
            auth=ApiKeyGate(ApiKeyAuth(config.auth), config.auth.open_listings, self.recorder),
            admission=admission,
            payloads=WorkerPayloads(config.models, config.voices, VoiceStore.in_data_dir(tmp_path), RefAudioPolicy(config.auth)),
            upstream=Upstream(admission, relay),
            encoders=encoders,
            recorder=self.recorder,
            max_body_bytes=config.server.max_body_bytes,
        )
        self.app = Entry([EntryPath("http", "POST", SPEECH_PATH, SpeechEntry(pipeline).enter)], FastAPI())

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://gw.test")

    def count(self, name: str, **labels: str) -> float:
        text = self.recorder.metrics.render()[0].decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return sample.value
        return 0.0

    def inflight(self) -> int:
        return sum(worker.inflight for worker in self.fleet.view.workers)


def every_worker(answers: list[Callable[[], Any]]) -> FakeTransport:
    """Whichever worker the policy picks: the n-th call gets the n-th answer."""

    class Sequenced(FakeTransport):
        async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] = {}) -> FakeResponse:
            self.script[url.removesuffix(SPEECH_PATH)] = [answers[len(self.calls)]()]
            return await super().post_stream(url, body, headers)

    return Sequenced({})


async def test_a_client_gone_before_the_first_byte_is_a_499_and_frees_the_worker(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, every_worker([lambda: HANG]))
    leave = asyncio.Event()
    body = json.dumps(BODY).encode()
    received = iter([{"type": "http.request", "body": body, "more_body": False}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        message = next(received, None)
        if message is not None:
            return message
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "method": "POST", "path": SPEECH_PATH, "raw_path": SPEECH_PATH.encode(), "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"x-sla-class", b"latency")],
        "http_version": "1.1", "scheme": "http", "server": ("gw.test", 80), "client": ("127.0.0.1", 1), "root_path": "",
    }  # fmt: skip
    request = asyncio.create_task(gateway.app(scope, receive, send))
    while not gateway.transport.calls:  # admitted, and waiting for the worker's first byte
        await asyncio.sleep(0)
    assert gateway.inflight() == 1
    leave.set()
    async with asyncio.timeout(5):
        await request
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499
    assert gateway.inflight() == 0
    assert gateway.count("higgs_gateway_requests_total", sla_class="latency", pool="none", status="499") == 1
    assert gateway.count("higgs_gateway_client_disconnects_total", phase="before_first_byte") == 1


async def test_an_encoder_that_cannot_open_is_a_500_and_releases_the_stream(tmp_path: Path) -> None:
    def broken(audio_format: AudioFormat, speed: float) -> StreamEncoder:
        raise RuntimeError("codec library missing")

    gateway = Gateway(tmp_path, every_worker([lambda: FakeResponse(200, [PCM, PCM])]), encoders=broken)
    async with gateway.client() as client:
        response = await client.post(SPEECH_PATH, json={**BODY, "response_format": "mp3"})
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"
    [upstream] = gateway.transport.responses
    assert upstream.closed  # the worker's stream is dropped, not left running
    assert gateway.inflight() == 0
    assert gateway.count("higgs_gateway_requests_total", sla_class="balanced", pool="none", status="500") == 1


async def test_a_worker_failing_mid_stream_ends_sse_with_an_error_event(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, every_worker([lambda: FakeResponse(200, [PCM, cut()])]))
    async with gateway.client() as client:
        response = await client.post(SPEECH_PATH, json={**BODY, "stream_format": "sse"})
    assert response.status_code == 200  # the status went out with the first event
    events = [json.loads(line[len("data: "):]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [event["type"] for event in events] == ["speech.audio.delta", "error"]
    assert base64.b64decode(events[0]["audio"]) == PCM
    assert events[1]["error"]["code"] == "upstream_error"
    assert gateway.inflight() == 0
    [worker] = [w for w in gateway.fleet.view.workers if w.last_error]
    assert worker.last_error.startswith("stream_error")  # blamed: the stream broke, not the client
    pool = worker.pool.value
    assert gateway.count("higgs_gateway_upstream_errors_total", pool=pool, kind="stream_error") == 1
    assert gateway.count("higgs_gateway_requests_total", sla_class="balanced", pool=pool, status="502") == 1


async def test_a_failure_before_the_first_byte_is_retried_on_another_worker(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, every_worker([lambda: FakeResponse(500, body=b"boom"), lambda: FakeResponse(200, [PCM])]))
    async with gateway.client() as client:
        response = await client.post(SPEECH_PATH, json=BODY, headers={"x-sla-class": "throughput"})
    assert response.status_code == 200 and response.content == PCM  # the client never saw the 500
    first, second = gateway.transport.calls
    assert first != second
    assert gateway.count("higgs_gateway_retries_total", reason="status_5xx") == 1
    assert gateway.inflight() == 0
    assert gateway.count("higgs_gateway_requests_total", sla_class="throughput", pool=response.headers["x-gateway-pool"], status="200") == 1



async def request_raw(gateway: Gateway, leave: asyncio.Event, until: asyncio.Event) -> list[dict[str, Any]]:
    """One speech request straight through the ASGI app; the client leaves once ``until``
    is set (if it ever is). Returns what the app sent."""
    body = json.dumps(BODY).encode()
    received = iter([{"type": "http.request", "body": body, "more_body": False}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        message = next(received, None)
        if message is not None:
            return message
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "method": "POST", "path": SPEECH_PATH, "raw_path": SPEECH_PATH.encode(), "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "http_version": "1.1", "scheme": "http", "server": ("gw.test", 80), "client": ("127.0.0.1", 1), "root_path": "",
    }  # fmt: skip
    request = asyncio.create_task(gateway.app(scope, receive, send))
    reached = asyncio.create_task(until.wait())
    await asyncio.wait({request, reached}, return_when=asyncio.FIRST_COMPLETED)
    if until.is_set():
        leave.set()  # hanging at the step: the client gives up
    async with asyncio.timeout(5):
        await request
    reached.cancel()
    return sent


async def test_the_awaits_before_the_first_byte_are_the_ones_the_fault_tests_hit(tmp_path: Path) -> None:
    transport = FaultyTransport(failing_then_serving(PCM))
    gateway = Gateway(tmp_path, transport)
    sent = await request_raw(gateway, asyncio.Event(), asyncio.Event())
    assert sent[0]["status"] == 200 and tuple(transport.steps[: len(AWAITS_BEFORE_AUDIO)]) == AWAITS_BEFORE_AUDIO


@pytest.mark.parametrize("fault", ["exception", "cancellation"])
@pytest.mark.parametrize("step", range(len(AWAITS_BEFORE_AUDIO)), ids=lambda i: f"{i}-{AWAITS_BEFORE_AUDIO[i]}")
async def test_a_failure_at_any_await_between_admission_and_the_first_byte_leaves_no_slot_held(
    tmp_path: Path, step: int, fault: str
) -> None:
    transport = FaultyTransport(failing_then_serving(PCM), step, HANG if fault == "cancellation" else RuntimeError("injected"))
    gateway = Gateway(tmp_path, transport)
    sent = await request_raw(gateway, asyncio.Event(), transport.reached)
    assert transport.reached.is_set()
    status = sent[0]["status"]
    if fault == "cancellation":
        assert status == 499
    elif AWAITS_BEFORE_AUDIO[step] == "close":
        assert status == 200  # a failed close of the dropped attempt changes nothing: the retry serves it
    else:
        assert status == 500
    assert gateway.inflight() == 0
    assert gateway.count("higgs_gateway_requests_total", sla_class="balanced", pool="none", status=str(status)) == (status != 200)


async def test_the_workers_slot_is_free_before_the_response_ends(tmp_path: Path) -> None:
    """A client that sends its next request the moment this one ends must find the worker
    free, also through another replica: the slot goes with the worker's last chunk."""
    held_at_finish: list[int] = []
    gateway: Gateway

    class Watched:
        def __init__(self, inner: StreamEncoder) -> None:
            self.inner = inner

        def encode(self, pcm: bytes) -> bytes:
            return self.inner.encode(pcm)

        def finish(self) -> bytes:  # the worker's stream has ended; the client has not heard it
            held_at_finish.append(gateway.inflight())
            return self.inner.finish()

        def close(self) -> None:
            self.inner.close()

    def watching(audio_format: AudioFormat, speed: float, sample_rate: int | None = None) -> StreamEncoder:
        return Watched(open_encoder(audio_format, speed, sample_rate=sample_rate))

    gateway = Gateway(tmp_path, every_worker([lambda: FakeResponse(200, [PCM, PCM])]), encoders=watching)
    async with gateway.client() as client:
        response = await client.post(SPEECH_PATH, json={**BODY, "response_format": "wav"})
    assert response.status_code == 200 and len(response.content) > 2 * len(PCM)
    assert held_at_finish == [0]
    assert gateway.inflight() == 0
