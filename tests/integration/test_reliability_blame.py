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
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.bench.leaks import LeakCheck
from tests.integration.conftest import ADMIN, SHORT_TEXT, gateway_metric, pools, speech_body, wait_idle
from tests.support.clip_server import ClipServer, clip_server
from tests.support.procs import free_port
from tests.support.stack import Stack, running_stack

BAD_EACH = 50  # the count; eject_after_failures is 3
# The rules policy sends latency to low-latency and throughput to high-throughput: each
# worker gets its share of every kind of request.
EXTRA = {
    "auth": {"ref_audio_url_hosts": ["127.0.0.1"]},
    "health": {"eject_after_failures": 3},
    "routing": {"policy": "rules"},
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
