"""Reliability, whose fault: no client can take a worker out (docs/reliability.md "Whose fault").

A real gateway in front of one low-latency and one high-throughput emulated worker that
answer bad requests as the released worker does: a 200 with no audio for
``max_new_tokens`` below 8, a 500 "Speech generation failed: ..." for a ``ref_audio`` URL
it cannot fetch (the worker really fetches it, from a local clip server, and really fails
on a closed port). The gateway lists 127.0.0.1 in ``auth.ref_audio_url_hosts`` so those
URLs reach the workers at all.

Many more such requests than ``eject_after_failures`` (3) go through, interleaved with
ordinary requests on both workers: every bad one gets a 400 that says what to fix, no
worker is ejected or even counted a failure, and every ordinary request is served.

Prompts no worker can hold (4096 emoji or CJK characters, a long ``ref_text``) are refused
before any worker is called. A fault that fires on every worker (the emulator's 500, cut and
hang faults; an empty 200 and a 200 cut before any byte, from stub workers and from emulated
workers whose model length is smaller than their pools' profiles say, which then fail a
prompt past the gateway's bound exactly as the released worker does) costs two attempts and
ejects nobody.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.bench.soak import LeakCheck
from tests.integration.conftest import ADMIN, SHORT_TEXT, gateway_metric, pools, set_faults, speech_body, wait_idle, worker_entry
from tests.integration.reliability_support import StubWorker, stub_worker, worker_counters
from tests.support.audio import reference_wav
from tests.support.clip_server import ClipServer, clip_server
from tests.support.procs import Proc, free_port
from tests.support.stack import Stack, gateway_config, running_gateway, running_stack

BAD_EACH = 50  # the count; eject_after_failures is 3
# The rules policy sends latency to low-latency and throughput to high-throughput: each
# worker gets its share of every kind of request.
FIRST_BYTE_TIMEOUT_S = 3.0  # the hang fault outlasts it; ordinary requests never come close
EXTRA = {
    "auth": {"ref_audio_url_hosts": ["127.0.0.1"]},
    "health": {"eject_after_failures": 3},
    "routing": {"policy": "rules"},
    "upstream": {"first_byte_timeout_s": FIRST_BYTE_TIMEOUT_S},
}


@pytest.fixture(scope="module")
def clips() -> Iterator[ClipServer]:
    with clip_server() as server:
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("blame"), 1, 1, time_scale=0.02, extra=EXTRA) as running:
        yield running


def leak_check(stack: Stack) -> LeakCheck:
    workers = [w for pool in pools(stack.url).values() for w in pool["workers"]]
    return LeakCheck.of((w["id"] for w in workers), (w["url"] for w in workers))


def assert_no_worker_blamed(stack: Stack) -> None:
    for pool in pools(stack.url).values():
        for worker in pool["workers"]:
            assert worker["state"] == "ready" and worker["routable"], worker
            assert worker["consecutive_failures"] == 0 and worker["last_error"] is None, worker
    assert gateway_metric(stack.url, "higgs_gateway_worker_ejections_total") == 0


def assert_clear_400(response: httpx.Response, param: str, code: str, leaks: LeakCheck) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code), error
    assert param in error["message"] and len(error["message"]) > 40, error["message"]
    assert leaks.find(response.content) is None, f"{leaks.find(response.content)}: {response.text}"
    return dict(error)


async def post(client: httpx.AsyncClient, url: str, sla: str, **fields: Any) -> httpx.Response:
    body = speech_body(SHORT_TEXT, response_format="pcm", **fields)
    return await client.post(f"{url}/v1/audio/speech", json=body, headers={"x-sla-class": sla})


def test_no_request_can_eject_a_worker(stack: Stack) -> None:
    leaks = leak_check(stack)
    closed_ports = [free_port() for _ in range(5)]  # nothing listens on them

    async def drive() -> tuple[list[httpx.Response], list[httpx.Response], list[httpx.Response]]:
        tiny, unreachable, ordinary = [], [], []
        async with httpx.AsyncClient(timeout=60) as client:
            for i in range(BAD_EACH):
                port = closed_ports[i % len(closed_ports)]
                sla = "latency" if i % 2 else "throughput"  # both pools, so both workers get them
                round_ = [
                    post(client, stack.url, sla, max_new_tokens=1 + i % 7),
                    post(client, stack.url, sla, ref_audio=f"http://127.0.0.1:{port}/voice-{i}.wav"),
                ]
                if i % 5 == 0:  # ordinary requests throughout, on each worker
                    round_ += [post(client, stack.url, "latency"), post(client, stack.url, "throughput")]
                answers = await asyncio.gather(*round_)
                tiny.append(answers[0])
                unreachable.append(answers[1])
                ordinary.extend(answers[2:])
        return tiny, unreachable, ordinary

    request_faults_before = gateway_metric(stack.url, "higgs_gateway_upstream_errors_total", kind="request_fault")
    tiny, unreachable, ordinary = asyncio.run(drive())

    for response in tiny:
        error = assert_clear_400(response, "max_new_tokens", "invalid_value", leaks)
        assert "at least 8" in error["message"]
    for response in unreachable:
        error = assert_clear_400(response, "ref_audio", "ref_audio_unreachable", leaks)
        assert "could not fetch" in error["message"]
    assert all(r.status_code == 200 and len(r.content) > 48_000 for r in ordinary), [r.status_code for r in ordinary]
    assert {r.headers["x-gateway-pool"] for r in ordinary} == {"low_latency", "high_throughput"}
    # Each unreachable URL reached a worker (which tried it three times) and was judged
    # the request's at once: no retry on the other worker, nothing counted against either.
    faults = gateway_metric(stack.url, "higgs_gateway_upstream_errors_total", kind="request_fault")
    assert faults - request_faults_before == BAD_EACH
    assert_no_worker_blamed(stack)
    wait_idle(stack.url, [p.url for procs in stack.workers.values() for p in procs])


def test_reference_urls_the_workers_cannot_use_are_the_requests(stack: Stack, clips: ClipServer) -> None:
    leaks = leak_check(stack)
    with httpx.Client(timeout=60) as client:

        def say(ref_audio: str) -> httpx.Response:
            body = speech_body(SHORT_TEXT, response_format="pcm", ref_audio=ref_audio)
            return client.post(f"{stack.url}/v1/audio/speech", json=body, headers={"x-sla-class": "latency"})

        served = say(f"{clips.url}/clip.wav")  # a good URL on a listed host: fetched and used
        assert served.status_code == 200 and served.content
        for _ in range(4):  # more than eject_after_failures
            assert_clear_400(say(f"{clips.url}/huge.wav"), "ref_audio", "ref_audio_too_large", leaks)
            assert_clear_400(say(f"{clips.url}/missing.wav"), "ref_audio", "ref_audio_unreachable", leaks)
        before = clips.hits["/broken.wav"]
        # A remote 5xx: the worker's 500 does not say it was the URL, so another worker
        # tries; failing the same way there makes it the request's.
        assert_clear_400(say(f"{clips.url}/broken.wav"), "ref_audio", "ref_audio_unusable", leaks)
        assert clips.hits["/broken.wav"] - before == 6, "each of the two workers tried the URL three times"
    assert_no_worker_blamed(stack)
    admin = httpx.get(f"{stack.url}/admin/pools", headers=ADMIN, timeout=10)
    assert admin.status_code == 200


# ---- prompts no worker can hold: refused before any worker is called ------------------------
EMOJI, CJK = "\U0001f600", "\u8bed"  # 4 and 3 bytes of UTF-8: up to as many tokens each
CLIP_URI = "data:audio/wav;base64," + base64.b64encode(reference_wav(2.5)).decode()


def test_prompts_no_worker_can_hold_are_refused_before_any_worker_is_called(stack: Stack) -> None:
    leaks = leak_check(stack)
    worker_urls = [p.url for procs in stack.workers.values() for p in procs]
    served_before = {url: worker_counters(url) for url in worker_urls}
    attempts_before = gateway_metric(stack.url, "higgs_gateway_upstream_errors_total")

    async def drive() -> tuple[list[tuple[str, httpx.Response]], list[httpx.Response]]:
        refused, ordinary = [], []
        async with httpx.AsyncClient(timeout=60) as client:
            for i in range(BAD_EACH):
                sla = "latency" if i % 2 else "throughput"
                bad = [
                    ("input", post_text(client, stack.url, sla, EMOJI * 4096)),
                    ("input", post_text(client, stack.url, sla, CJK * 4096)),
                    # ref_text alone too long, or too long beside the input and the clip.
                    ("ref_text", post(client, stack.url, sla, ref_audio=CLIP_URI, ref_text=CJK * (4096 - i))),
                ]
                round_ = [call for _, call in bad]
                if i % 5 == 0:  # ordinary requests throughout, on each worker
                    round_ += [post(client, stack.url, "latency"), post(client, stack.url, "throughput")]
                answers = await asyncio.gather(*round_)
                refused += [(param, answer) for (param, _), answer in zip(bad, answers)]
                ordinary += answers[len(bad):]
        return refused, ordinary

    refused, ordinary = asyncio.run(drive())

    assert len(refused) == 3 * BAD_EACH
    for param, response in refused:
        error = assert_clear_400(response, param, "prompt_too_long", leaks)
        assert "8192" in error["message"] and "bytes" in error["message"]
    assert all(r.status_code == 200 and len(r.content) > 48_000 for r in ordinary), [r.status_code for r in ordinary]
    assert {r.headers["x-gateway-pool"] for r in ordinary} == {"low_latency", "high_throughput"}
    # No refused request reached a worker: the workers served the ordinary ones and nothing else.
    served = {url: worker_counters(url) for url in worker_urls}
    assert sum(served[u]["success"] - served_before[u]["success"] for u in worker_urls) == len(ordinary)
    assert all(served[u]["failed"] == served_before[u]["failed"] for u in worker_urls)
    assert gateway_metric(stack.url, "higgs_gateway_upstream_errors_total") == attempts_before
    assert_no_worker_blamed(stack)
    wait_idle(stack.url, worker_urls)


async def post_text(client: httpx.AsyncClient, url: str, sla: str, text: str) -> httpx.Response:
    body = speech_body(text, response_format="pcm")
    return await client.post(f"{url}/v1/audio/speech", json=body, headers={"x-sla-class": sla})


# ---- a fault on every worker: two attempts, nobody ejected ----------------------------------
REQUESTS_EACH = 4  # more than eject_after_failures
EMULATOR_FAULTS = {
    # fault switch, the client's status and code, how the first attempt failed
    "500": ({"fail_next": REQUESTS_EACH}, 400, "unservable_request", "status_5xx"),
    "cut_before_audio": ({"cut_after_chunks": 0}, 400, "unservable_request", "stream_error"),
    # The engine failing the request before its first chunk: the raw stream ends cut.
    "error_before_audio": ({"error_after_chunks": 0}, 400, "unservable_request", "stream_error"),
    "hang": ({"hang_seconds": FIRST_BYTE_TIMEOUT_S + 2}, 504, "upstream_timeout", "first_byte_timeout"),
}


@pytest.mark.parametrize("fault", sorted(EMULATOR_FAULTS))
def test_a_fault_on_every_emulated_worker_costs_two_attempts_and_ejects_nobody(stack: Stack, fault: str) -> None:
    switch, status, code, first_kind = EMULATOR_FAULTS[fault]
    worker_urls = [p.url for procs in stack.workers.values() for p in procs]
    retries_before = gateway_metric(stack.url, "higgs_gateway_retries_total")
    first_before = gateway_metric(stack.url, "higgs_gateway_upstream_errors_total", pool="low_latency", kind=first_kind)
    settled_before = gateway_metric(stack.url, "higgs_gateway_upstream_errors_total", pool="high_throughput", kind="request_fault")
    for url in worker_urls:
        set_faults(url, clear=True, **switch)
    try:
        async def drive() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=60) as client:
                return list(await asyncio.gather(*(post(client, stack.url, "latency") for _ in range(REQUESTS_EACH))))

        answers = asyncio.run(drive())
    finally:
        for url in worker_urls:
            set_faults(url, clear=True)
    for response in answers:
        assert response.status_code == status, response.text
        assert response.json()["error"]["code"] == code
    # Each request: one attempt on low-latency, one retry on high-throughput, no third.
    assert gateway_metric(stack.url, "higgs_gateway_retries_total") - retries_before == REQUESTS_EACH
    assert gateway_metric(stack.url, "higgs_gateway_upstream_errors_total", pool="low_latency", kind=first_kind) - first_before == REQUESTS_EACH
    settled = gateway_metric(stack.url, "higgs_gateway_upstream_errors_total", pool="high_throughput", kind="request_fault")
    assert settled - settled_before == REQUESTS_EACH, "the second attempt found the same failure: the request's"
    assert_no_worker_blamed(stack)
    wait_idle(stack.url, worker_urls)


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, StubWorker, StubWorker]]:
    """A gateway over two stub workers (one per pool) that answer what no emulator fault does."""
    tmp = tmp_path_factory.mktemp("blame-stubs")
    with stub_worker() as ll, stub_worker() as ht:
        config = gateway_config(tmp, [ll.url], [ht.url], free_port(), EXTRA)
        with running_gateway(tmp, config) as gateway:
            yield gateway, ll, ht


@pytest.mark.parametrize(
    ("answer", "code"), [("empty", "no_audio"), ("cut", "unservable_request")], ids=["empty_200", "200_cut_before_any_byte"]
)
def test_a_200_without_audio_from_every_worker_costs_two_attempts_and_ejects_nobody(
    stubs: tuple[Proc, StubWorker, StubWorker], answer: str, code: str
) -> None:
    gateway, *workers = stubs
    for stub in workers:
        stub.behaviour.speech_status, stub.behaviour.speech_body = 200, answer
    before = [len(stub.speech_requests()) for stub in workers]
    with httpx.Client(timeout=60) as client:
        for _ in range(REQUESTS_EACH):
            body = speech_body(SHORT_TEXT, response_format="pcm")
            response = client.post(f"{gateway.url}/v1/audio/speech", json=body, headers={"x-sla-class": "latency"})
            assert response.status_code == 400, response.text
            assert response.json()["error"]["code"] == code
    tried = [len(stub.speech_requests()) - b for stub, b in zip(workers, before)]
    assert tried == [REQUESTS_EACH, REQUESTS_EACH], "each request: one attempt per worker, no third"
    for stub in workers:
        worker = worker_entry(gateway.url, stub.url)
        assert (worker["state"], worker["consecutive_failures"], worker["last_error"]) == ("ready", 0, None), worker
    assert gateway_metric(gateway.url, "higgs_gateway_worker_ejections_total") == 0


# ---- the released worker's own failures on every worker: two attempts, nobody ejected -------
# Static workers started with a smaller Stage 0 model length than their pools' profiles say
# (8192): the gateway's bound lets a 4096-character prompt through, and every worker then
# fails it as the released one does, with no stub and no fault switch: a prompt that leaves
# fewer than 8 tokens of room is a 200 with no audio (higgs_audio_v3.py 300-306), one of
# max_model_len tokens or more a 200 cut before any byte (input_processor.py 440-485 after
# serving_speech.py 2064). English is ~4 characters a token in the emulator's length model.
WORKER_MODEL_LEN = 1024
ROOMLESS_TEXT = ((SHORT_TEXT + " ") * 60)[:4060]  # 3 + 1015 tokens: 6 left, no audio
OVERLONG_TEXT = ((SHORT_TEXT + " ") * 60)[:4096]  # 3 + 1024 tokens: over the model length


@pytest.fixture(scope="module")
def short_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    overrides = ["--stage-overrides", json.dumps({"0": {"max_model_len": WORKER_MODEL_LEN}})]
    tmp = tmp_path_factory.mktemp("blame-short")
    with running_stack(tmp, 1, 1, time_scale=0.02, extra=EXTRA, worker_args=overrides) as running:
        yield running


def read_direct(worker_url: str, text: str) -> tuple[int, int, bool]:
    """A worker's own answer to ``text``: status, audio bytes, and whether the stream ended cleanly."""
    body = {"input": text, "response_format": "pcm", "stream_format": "audio"}
    with httpx.stream("POST", f"{worker_url}/v1/audio/speech", json=body, timeout=30) as response:
        size = 0
        try:
            for chunk in response.iter_bytes():
                size += len(chunk)
        except httpx.RemoteProtocolError:
            return response.status_code, size, False
        return response.status_code, size, True


@pytest.mark.parametrize(
    ("text", "code", "first_kind", "direct"),
    [
        (ROOMLESS_TEXT, "no_audio", "stream_error", (200, 0, True)),
        (OVERLONG_TEXT, "unservable_request", "stream_error", (200, 0, False)),
    ],
    ids=["empty_200", "overlong_prompt_cut"],
)
def test_the_released_workers_own_failures_on_every_worker_cost_two_attempts_and_eject_nobody(
    short_stack: Stack, text: str, code: str, first_kind: str, direct: tuple[int, int, bool]
) -> None:
    worker_urls = [p.url for procs in short_stack.workers.values() for p in procs]
    # Each worker, asked directly, answers as the released worker would.
    assert all(read_direct(url, text) == direct for url in worker_urls)
    leaks = leak_check(short_stack)
    retries_before = gateway_metric(short_stack.url, "higgs_gateway_retries_total")
    first_before = gateway_metric(short_stack.url, "higgs_gateway_upstream_errors_total", pool="low_latency", kind=first_kind)
    settled_before = gateway_metric(
        short_stack.url, "higgs_gateway_upstream_errors_total", pool="high_throughput", kind="request_fault"
    )

    async def drive() -> tuple[list[httpx.Response], list[httpx.Response]]:
        bad, ordinary = [], []
        async with httpx.AsyncClient(timeout=60) as client:
            for _ in range(REQUESTS_EACH):  # more than eject_after_failures, with ordinary traffic between
                answers = await asyncio.gather(
                    post_text(client, short_stack.url, "latency", text),
                    post(client, short_stack.url, "latency"),
                    post(client, short_stack.url, "throughput"),
                )
                bad.append(answers[0])
                ordinary.extend(answers[1:])
        return bad, ordinary

    bad, ordinary = asyncio.run(drive())
    for response in bad:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == code and len(error["message"]) > 40, error
        assert leaks.find(response.content) is None, response.text
    assert all(r.status_code == 200 and len(r.content) > 48_000 for r in ordinary), [r.status_code for r in ordinary]
    assert {r.headers["x-gateway-pool"] for r in ordinary} == {"low_latency", "high_throughput"}
    # Each bad request: one attempt on low-latency, one retry on high-throughput, no third.
    assert gateway_metric(short_stack.url, "higgs_gateway_retries_total") - retries_before == REQUESTS_EACH
    first = gateway_metric(short_stack.url, "higgs_gateway_upstream_errors_total", pool="low_latency", kind=first_kind)
    assert first - first_before == REQUESTS_EACH
    settled = gateway_metric(short_stack.url, "higgs_gateway_upstream_errors_total", pool="high_throughput", kind="request_fault")
    assert settled - settled_before == REQUESTS_EACH, "the second attempt found the same failure: the request's"
    assert_no_worker_blamed(short_stack)
    wait_idle(short_stack.url, worker_urls)
