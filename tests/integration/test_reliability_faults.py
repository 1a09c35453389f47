"""Reliability, worker faults on real emulated workers: hangs, health flapping, a whole pool
down, streams cut mid-way, and a worker killed mid-stream that comes back on its port.

One low-latency and one high-throughput emulated worker behind a gateway. ``latency``
requests go to low-latency while it has a free slot and ``throughput`` ones to
high-throughput, so each fault lands where the test puts it. The tests run in file order;
the last one kills and replaces the low-latency worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import (
    LONG_TEXT,
    SHORT_TEXT,
    emulator_on_port,
    gateway_metric,
    set_faults,
    speech_body,
    total_inflight,
    wait_idle,
    wait_until,
    worker_entry,
    worker_pcm,
)
from tests.integration.reliability_support import (
    expected_pcm_bytes,
    sse_events,
    upload_voice,
    worker_counters,
    worker_voices,
)
from tests.support.stack import LL_PROFILE, Stack, running_stack

TIME_SCALE = 0.05
FIRST_BYTE_TIMEOUT_S = 1.5
HALF_OPEN_S = 1.0
EXTRA = {
    "upstream": {"first_byte_timeout_s": FIRST_BYTE_TIMEOUT_S},
    "health": {"interval_s": 0.5, "half_open_after_s": HALF_OPEN_S, "eject_after_failures": 2},
    # Faults are set on one worker per class: `throughput` never takes low-latency places here.
    "routing": {"thresholds": {"reserve_for_latency": 16, "adaptive_latency_reserve": False}},
}
# ~80 s of audio (the Stage 0 cap): at time scale 0.05 the stream lasts about 4 s.
VERY_LONG_TEXT = " ".join([SHORT_TEXT] * 18)
EJECTIONS = "higgs_gateway_worker_ejections_total"
UPSTREAM_ERRORS = "higgs_gateway_upstream_errors_total"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("faults"), 1, 1, time_scale=TIME_SCALE, extra=EXTRA) as running:
        yield running


def ll(stack: Stack) -> str:
    return stack.workers["low_latency"][0].url


def ht(stack: Stack) -> str:
    return stack.workers["high_throughput"][0].url


def speak(stack: Stack, sla_class: str, text: str = SHORT_TEXT, **fields: object) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/audio/speech",
        json=speech_body(text, response_format="pcm", **fields),
        headers={"x-sla-class": sla_class},
        timeout=60,
    )


def state(stack: Stack, worker_url: str) -> str:
    return str(worker_entry(stack.url, worker_url)["state"])


def wait_ready(stack: Stack, *urls: str) -> None:
    for url in urls:
        wait_until(lambda url=url: worker_entry(stack.url, url)["routable"], 30, f"{url} routable again")


def test_a_hung_worker_is_timed_out_and_the_request_retried_elsewhere(stack: Stack) -> None:
    reference = worker_pcm(ht(stack), SHORT_TEXT)
    retries_before = gateway_metric(stack.url, "higgs_gateway_retries_total", reason="first_byte_timeout")
    errors_before = gateway_metric(stack.url, UPSTREAM_ERRORS, pool="low_latency", kind="first_byte_timeout")
    set_faults(ll(stack), hang_seconds=60)
    try:
        response = speak(stack, "latency")
    finally:
        set_faults(ll(stack), clear=True)  # releases the request the worker was sitting on
    assert response.status_code == 200, response.text
    assert response.content == reference, "the whole clip, from the worker that answered"
    assert response.headers["x-gateway-route-reason"] == "retry_other_worker"
    assert response.headers["x-gateway-pool"] == "high_throughput"
    assert gateway_metric(stack.url, "higgs_gateway_retries_total", reason="first_byte_timeout") == retries_before + 1
    assert gateway_metric(stack.url, UPSTREAM_ERRORS, pool="low_latency", kind="first_byte_timeout") == errors_before + 1
    wait_idle(stack.url, [ll(stack), ht(stack)])
    wait_ready(stack, ll(stack))


def test_health_flapping_ejects_and_recovers_with_no_traffic_to_the_sick_worker(stack: Stack) -> None:
    sick = ll(stack)
    ejections_before = gateway_metric(stack.url, EJECTIONS, pool="low_latency", reason="health_probe")
    for cycle in range(2):
        set_faults(sick, unhealthy=True)
        wait_until(lambda: state(stack, sick) == "ejected", 30, f"cycle {cycle}: ejected after failed probes")
        before = worker_counters(sick)
        for sla_class in ("latency", "balanced", "latency", "balanced"):
            response = speak(stack, sla_class)
            assert response.status_code == 200, response.text
            assert response.headers["x-gateway-pool"] == "high_throughput"
            assert response.headers["x-gateway-route-reason"] == "no_ll_workers"
        time.sleep(HALF_OPEN_S * 1.5)  # at least one half-open probe comes and fails
        assert state(stack, sick) == "ejected", "a failed half-open probe keeps the worker out"
        assert worker_counters(sick) == before, "no request reached the ejected worker"

        set_faults(sick, unhealthy=False)
        wait_ready(stack, sick)
        response = speak(stack, "latency")
        assert response.status_code == 200 and response.headers["x-gateway-pool"] == "low_latency", response.headers
        assert worker_counters(sick)["success"] == before["success"] + 1, "recovered: routed to again"
    assert gateway_metric(stack.url, EJECTIONS, pool="low_latency", reason="health_probe") == ejections_before + 2


def test_a_whole_pool_down_sends_traffic_to_the_other_then_nothing_is_503(stack: Stack) -> None:
    try:
        set_faults(ht(stack), unhealthy=True)
        wait_until(lambda: state(stack, ht(stack)) == "ejected", 30, "high-throughput pool down")
        response = speak(stack, "throughput")
        assert response.status_code == 200, response.text
        assert response.headers["x-gateway-pool"] == "low_latency"
        assert response.headers["x-gateway-route-reason"] == "no_ht_workers"

        set_faults(ll(stack), unhealthy=True)
        wait_until(lambda: state(stack, ll(stack)) == "ejected", 30, "low-latency pool down too")
        for sla_class in ("latency", "balanced", "throughput"):
            rejected = speak(stack, sla_class)
            assert rejected.status_code == 503, rejected.text
            assert rejected.headers["retry-after"] == "1"
            assert rejected.headers["x-gateway-dropped-reason"] == "no_workers"
            error = rejected.json()["error"]
            assert error["code"] == "no_workers" and set(error) == {"message", "type", "param", "code"}
        assert httpx.get(f"{stack.url}/ready", timeout=10).status_code == 503
    finally:
        set_faults(ll(stack), clear=True)
        set_faults(ht(stack), clear=True)
    wait_ready(stack, ll(stack), ht(stack))
    assert speak(stack, "balanced").status_code == 200


def test_a_stream_cut_mid_way_ends_sse_with_an_error_event_and_cuts_a_raw_stream(stack: Stack) -> None:
    worker = ht(stack)
    errors_before = gateway_metric(stack.url, UPSTREAM_ERRORS, pool="high_throughput", kind="stream_error")
    set_faults(worker, cut_after_chunks=2)
    try:
        sse = speak(stack, "throughput", LONG_TEXT, stream_format="sse")
        assert sse.status_code == 200, sse.text
        events = sse_events(sse.content)
        assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1), events[-1]
        assert len(events) >= 2, "some audio arrived before the cut"
        assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "upstream_error", events[-1]
        assert events[-1]["error"]["partial_audio"] is True and events[-1]["error"]["action"] == "discard"
        assert "speech.audio.done" not in {e["type"] for e in events}, "never claims the clip is complete"

        set_faults(worker, cut_after_chunks=None, error_after_chunks=1)
        received = 0
        with pytest.raises(httpx.RemoteProtocolError):
            with httpx.stream(
                "POST", f"{stack.url}/v1/audio/speech", json=speech_body(LONG_TEXT, response_format="pcm"),
                headers={"x-sla-class": "throughput"}, timeout=60,
            ) as raw:  # fmt: skip
                assert raw.status_code == 200
                for chunk in raw.iter_raw():
                    received += len(chunk)
        assert 0 < received < expected_pcm_bytes(LONG_TEXT), "a raw stream is cut: no terminating chunk"
    finally:
        set_faults(worker, clear=True)
    assert gateway_metric(stack.url, UPSTREAM_ERRORS, pool="high_throughput", kind="stream_error") == errors_before + 2
    wait_idle(stack.url, [ll(stack), worker])


def test_a_worker_killed_mid_stream_cuts_the_stream_frees_the_slot_and_comes_back(stack: Stack, tmp_path: Path) -> None:
    """Runs last: kills the low-latency worker (SIGKILL) and starts a new one on its port."""
    victim = stack.workers["low_latency"][0]
    port = int(victim.url.rsplit(":", 1)[1])
    upload_voice(stack.url, "before-crash")
    errors_before = gateway_metric(stack.url, UPSTREAM_ERRORS, pool="low_latency", kind="stream_error")

    received = 0
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        with httpx.stream(
            "POST", f"{stack.url}/v1/audio/speech", json=speech_body(VERY_LONG_TEXT, response_format="pcm"),
            headers={"x-sla-class": "latency"}, timeout=60,
        ) as response:  # fmt: skip
            assert response.status_code == 200
            assert response.headers["x-gateway-pool"] == "low_latency"
            for chunk in response.iter_raw():
                received += len(chunk)
                if victim.popen.poll() is None and received >= 48_000:
                    victim.popen.kill()  # mid-stream, no goodbye
                    victim.popen.wait(10)
    assert 0 < received < expected_pcm_bytes(VERY_LONG_TEXT), "the client saw a cut stream, not a short clip"
    assert total_inflight(stack.url) == 0, "the lease was released when the stream broke"
    assert gateway_metric(stack.url, UPSTREAM_ERRORS, pool="low_latency", kind="stream_error") == errors_before + 1
    wait_until(lambda: state(stack, victim.url) == "ejected", 30, "the dead worker is taken out of routing")

    # While it is gone: the other pool serves, and an upload is stored for it.
    response = speak(stack, "latency")
    assert response.status_code == 200 and response.headers["x-gateway-route-reason"] == "no_ll_workers"
    during = upload_voice(stack.url, "during-crash")
    assert during["workers"]["failed"] == 1, during  # counts: worker ids are the admin's

    with emulator_on_port(tmp_path, port, LL_PROFILE, TIME_SCALE, "reborn-ll") as reborn:
        voices_when_routable: set[str] | None = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and voices_when_routable is None:
            if worker_entry(stack.url, reborn.url)["routable"]:
                voices_when_routable = worker_voices(reborn.url)
            time.sleep(0.02)
        assert voices_when_routable is not None, "the restarted worker never became routable"
        assert {"before-crash", "during-crash"} <= voices_when_routable, (
            f"routable with voices {voices_when_routable}: every voice is replayed before routing"
        )
        response = speak(stack, "latency", voice="during-crash")
        assert response.status_code == 200, response.text
        assert response.headers["x-gateway-pool"] == "low_latency"
        for name in ("before-crash", "during-crash"):
            assert httpx.delete(f"{stack.url}/v1/audio/voices/{name}", timeout=30).status_code == 200
        wait_idle(stack.url, [reborn.url, ht(stack)])
