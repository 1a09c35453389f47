"""A full fleet refuses a voice session before the upgrade, and the refusal leaves nothing.

One low-latency worker with one slot, a `latency` queue of one and one session per replica
make every capacity refusal cheap to reach: no routable worker (503 ``no_workers``), a full
`latency` queue (429 ``queue_full``) and ``sessions.max_open_per_replica`` (503
``too_many_sessions``). Each is an HTTP answer to the handshake with the OpenAI envelope,
``Retry-After`` and the client's ``x-request-id``; afterwards no session is open, no slot
held, and the next session is served. A sentence refused later, in an open session, fails
alone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect as async_connect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.integration.conftest import (
    ADMIN,
    SHORT_TEXT,
    gateway_metric,
    speech_body,
    wait_idle,
    wait_until,
    worker_entry,
)
from tests.integration.test_emulator_speech_stream import Session
from tests.support.stack import Stack, running_stack, wait_routable

PCM_STREAM = {"response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}
RETRY_AFTER_S = 3
EXTRA = {
    "pools": {"low_latency": {"slots_per_worker": 1}},
    "admission": {"queue_size": {"latency": 1}, "max_wait_s": {"latency": 60}, "retry_after_s": RETRY_AFTER_S},
    "sessions": {"max_open_per_replica": 1},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("session-refusals"), 1, 0, time_scale=0.25, extra=EXTRA) as running:
        yield running


def ws_url(stack: Stack) -> str:
    return stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream"


def assert_refused(refused: InvalidStatus, status: int, code: str, retry_after: int, request_id: str) -> None:
    response = refused.response
    assert response.status_code == status, (response.status_code, response.body)
    assert response.headers["retry-after"] == str(retry_after)
    assert response.headers["x-request-id"] == request_id
    assert response.headers["content-type"] == "application/json"
    error = json.loads(response.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and len(error["message"]) > 10, error
    assert error["type"] == ("requests" if status == 429 else "server_error"), error


def served_after(stack: Stack) -> None:
    """Nothing held, and the next session is accepted and speaks."""
    workers = [stack.workers["low_latency"][0].url]
    wait_idle(stack.url, workers)
    wait_until(lambda: gateway_metric(stack.url, "higgs_gateway_sessions_open") == 0, 20, "sessions_open back to 0")
    with connect(ws_url(stack), max_size=None) as ws:
        session = Session(ws)
        session.send("session.config", **PCM_STREAM)
        kinds = [m["type"] if isinstance(m, dict) else "<audio>" for m in session.utterance("Hello there.")]
        assert kinds[0] == "audio.start" and kinds[-2:] == ["audio.done", "session.done"], kinds
    wait_idle(stack.url, workers)
    wait_until(lambda: gateway_metric(stack.url, "higgs_gateway_sessions_open") == 0, 20, "sessions_open back to 0")
    assert gateway_metric(stack.url, "higgs_gateway_admission_queue_depth") == 0


def test_no_routable_worker_refuses_the_handshake_with_503(stack: Stack) -> None:
    worker_id = worker_entry(stack.url, stack.workers["low_latency"][0].url)["id"]
    drain = httpx.post(f"{stack.url}/admin/workers/{worker_id}/drain", headers=ADMIN, timeout=10)
    assert drain.status_code == 200, drain.text
    try:
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(stack), additional_headers={"x-request-id": "refused-no-workers"})
        assert_refused(refused.value, 503, "no_workers", RETRY_AFTER_S, "refused-no-workers")
        assert refused.value.response.headers["x-gateway-dropped-reason"] == "no_workers"
    finally:
        httpx.post(f"{stack.url}/admin/workers/{worker_id}/undrain", headers=ADMIN, timeout=10)
    wait_routable(stack.url, {"low_latency": 1})
    served_after(stack)


def test_one_session_past_max_open_per_replica_is_503(stack: Stack) -> None:
    with connect(ws_url(stack), max_size=None) as first:
        Session(first).send("session.config", **PCM_STREAM)
        wait_until(lambda: gateway_metric(stack.url, "higgs_gateway_sessions_open") == 1, 20, "one session open")
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(stack), additional_headers={"x-request-id": "refused-too-many"})
        assert_refused(refused.value, 503, "too_many_sessions", RETRY_AFTER_S, "refused-too-many")
    served_after(stack)  # the place was given back


async def _post(client: httpx.AsyncClient, stack: Stack, text: str) -> httpx.Response:
    body: dict[str, Any] = speech_body(text, response_format="pcm")
    return await client.post(f"{stack.url}/v1/audio/speech", json=body, headers={"x-sla-class": "latency"})


async def test_a_full_latency_queue_refuses_the_handshake_with_429(stack: Stack) -> None:
    long_text = " ".join([SHORT_TEXT] * 18)
    async with httpx.AsyncClient(timeout=120) as client:
        body = speech_body(long_text, response_format="pcm", stream_format="audio")
        async with client.stream(
            "POST", f"{stack.url}/v1/audio/speech", json=body, headers={"x-sla-class": "latency"}
        ) as holder:
            assert holder.status_code == 200  # the only slot is taken while this streams
            queued = asyncio.create_task(_post(client, stack, SHORT_TEXT))  # the latency queue's one place
            await asyncio.to_thread(
                wait_until,
                lambda: gateway_metric(stack.url, "higgs_gateway_admission_queue_depth", sla_class="latency") == 1,
                30,
                "one latency request queued",
            )
            with pytest.raises(InvalidStatus) as refused:
                await async_connect(ws_url(stack), additional_headers={"x-request-id": "refused-queue-full"})
            assert_refused(refused.value, 429, "queue_full", RETRY_AFTER_S, "refused-queue-full")
            assert refused.value.response.headers["x-gateway-dropped-reason"] == "queue_full"
        # The holder left: its slot goes to the queued request.
        served = await queued
    assert served.status_code == 200 and served.content, served.text
    await asyncio.to_thread(served_after, stack)


async def test_a_sentence_refused_by_a_full_queue_fails_alone_and_the_session_goes_on(stack: Stack) -> None:
    long_text = " ".join([SHORT_TEXT] * 18)
    async with async_connect(ws_url(stack), max_size=None) as ws, httpx.AsyncClient(timeout=120) as client:
        await ws.send(json.dumps({"type": "session.config", **PCM_STREAM}))
        body = speech_body(long_text, response_format="pcm", stream_format="audio")
        async with client.stream(
            "POST", f"{stack.url}/v1/audio/speech", json=body, headers={"x-sla-class": "latency"}
        ) as holder:
            assert holder.status_code == 200
            queued = asyncio.create_task(_post(client, stack, SHORT_TEXT))
            await asyncio.to_thread(
                wait_until,
                lambda: gateway_metric(stack.url, "higgs_gateway_admission_queue_depth", sla_class="latency") == 1,
                30,
                "one latency request queued",
            )
            await ws.send(json.dumps({"type": "input.text", "text": "Hello there."}))
            await ws.send(json.dumps({"type": "input.done"}))
            answers = []
            while not answers or answers[-1].get("type") != "session.done":
                frame = await asyncio.wait_for(ws.recv(), 30)
                assert isinstance(frame, str), "no audio while the fleet is full"
                answers.append(json.loads(frame))
        served = await queued
        assert served.status_code == 200, served.text
        # As a worker answers a sentence that fails: its unit opens, errs and ends with error: true.
        assert [a["type"] for a in answers] == ["audio.start", "error", "audio.done", "session.done"], answers
        assert answers[1]["message"].startswith("Generation failed for utterance 0, sentence 0: "), answers
        assert answers[2]["error"] is True and answers[2]["total_bytes"] == 0
        # The session goes on once the fleet has room.
        await ws.send(json.dumps({"type": "input.text", "text": "Hello again."}))
        await ws.send(json.dumps({"type": "input.done"}))
        kinds = []
        while not kinds or kinds[-1] != "session.done":
            frame = await asyncio.wait_for(ws.recv(), 30)
            kinds.append("<audio>" if isinstance(frame, bytes) else json.loads(frame)["type"])
        assert kinds[0] == "audio.start" and kinds[-2:] == ["audio.done", "session.done"], kinds
    await asyncio.to_thread(served_after, stack)
