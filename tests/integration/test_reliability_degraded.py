"""Degrade, don't fail: one pool down, and a worker that restarts between two probes.

Real processes: one low-latency and one high-throughput emulated worker behind a gateway
(``higgs-gateway serve``). With the low-latency pool drained or dead the gateway stays
ready (degraded) and serves every class from high-throughput; a low-latency worker
killed and restarted on its port faster than the probes can notice, with its voices
gone, is replayed them before it serves a request naming one, and no such request fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import (
    ADMIN,
    SHORT_TEXT,
    emulator_on_port,
    gateway_metric,
    set_faults,
    speech_body,
    wait_until,
    worker_entry,
)
from tests.integration.reliability_support import upload_voice, worker_voices
from tests.support.stack import LL_PROFILE, Stack, running_stack

TIME_SCALE = 0.05
# Long enough that the kill and the restart below fall between two probes of the worker.
PROBE_INTERVAL_S = 4.0
EXTRA = {"health": {"interval_s": PROBE_INTERVAL_S, "jitter": 0.0, "half_open_after_s": 1.0, "eject_after_failures": 2}}
CLASSES = ("latency", "balanced", "throughput")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("degraded"), 1, 1, time_scale=TIME_SCALE, extra=EXTRA) as running:
        yield running


def ll(stack: Stack) -> str:
    return stack.workers["low_latency"][0].url


def ready(stack: Stack) -> tuple[int, dict[str, Any]]:
    response = httpx.get(f"{stack.url}/ready", timeout=10)
    return response.status_code, response.json()


def speak(stack: Stack, sla_class: str, **fields: Any) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/audio/speech",
        json=speech_body(SHORT_TEXT, response_format="pcm", **fields),
        headers={"x-sla-class": sla_class},
        timeout=60,
    )


def assert_degraded_and_served_by_high_throughput(stack: Stack) -> None:
    status, body = ready(stack)
    assert status == 200, body
    assert body["status"] == "degraded" and body["degraded"] is True, body
    assert body["empty_pools"] == ["low_latency"] and body["routable_workers"]["high_throughput"] == 1, body
    assert body["empty_since"]["low_latency"] <= time.time() and body["empty_for_s"]["low_latency"] >= 0, body
    assert gateway_metric(stack.url, "higgs_gateway_degraded") == 1
    assert gateway_metric(stack.url, "higgs_gateway_pool_empty_seconds", pool="high_throughput") == 0
    for sla_class in CLASSES:
        for _ in range(2):
            response = speak(stack, sla_class)
            assert response.status_code == 200, response.text
            assert response.headers["x-gateway-pool"] == "high_throughput", (sla_class, dict(response.headers))
            assert response.headers["x-gateway-route-reason"] == "no_ll_workers", (sla_class, dict(response.headers))


def assert_back_to_normal(stack: Stack) -> None:
    wait_until(lambda: ready(stack)[1]["status"] == "ready", 30, "/ready back to ready, not degraded")
    status, body = ready(stack)
    assert status == 200 and body["degraded"] is False and body["empty_pools"] == [] and body["empty_since"] == {}, body
    assert gateway_metric(stack.url, "higgs_gateway_degraded") == 0
    assert gateway_metric(stack.url, "higgs_gateway_pool_empty_seconds", pool="low_latency") == 0
    response = speak(stack, "latency")
    assert response.status_code == 200 and response.headers["x-gateway-pool"] == "low_latency"


def degraded_log_lines(stack: Stack) -> list[str]:
    return [line for line in stack.gateway.log().splitlines() if "has no routable worker" in line]


def test_a_drained_low_latency_pool_is_degraded_not_down(stack: Stack) -> None:
    worker_id = worker_entry(stack.url, ll(stack))["id"]
    before = len(degraded_log_lines(stack))
    response = httpx.post(f"{stack.url}/admin/workers/{worker_id}/drain", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    try:
        assert_degraded_and_served_by_high_throughput(stack)
        assert gateway_metric(stack.url, "higgs_gateway_pool_empty_seconds", pool="low_latency") >= 0
    finally:
        assert httpx.post(f"{stack.url}/admin/workers/{worker_id}/undrain", headers=ADMIN, timeout=10).status_code == 200
    assert_back_to_normal(stack)
    # Six requests were served degraded: the log says so once, and once that it is over.
    lines = degraded_log_lines(stack)[before:]
    assert len(lines) == 1 and "low_latency" in lines[0] and "high_throughput" in lines[0], lines
    assert sum("low_latency serves again" in line for line in stack.gateway.log().splitlines()) >= 1


def test_a_dead_low_latency_pool_is_degraded_not_down(stack: Stack) -> None:
    set_faults(ll(stack), unhealthy=True)
    try:
        wait_until(lambda: worker_entry(stack.url, ll(stack))["state"] == "ejected", 30, "low-latency worker ejected")
        assert_degraded_and_served_by_high_throughput(stack)
    finally:
        set_faults(ll(stack), clear=True)
    assert_back_to_normal(stack)


def test_a_worker_restarted_between_probes_gets_its_voices_before_serving_them(stack: Stack, tmp_path: Path) -> None:
    """Runs last: kills the low-latency worker and starts a fresh one (no voices) on its port."""
    upload_voice(stack.url, "keeper")
    victim = stack.workers["low_latency"][0]
    assert "keeper" in worker_voices(victim.url)
    port = int(victim.url.rsplit(":", 1)[1])
    restarts_before = gateway_metric(stack.url, "higgs_gateway_worker_restarts_total", pool="low_latency")

    victim.popen.kill()
    victim.popen.wait(10)
    with emulator_on_port(tmp_path, port, LL_PROFILE, TIME_SCALE, "restarted-ll") as reborn:
        assert "keeper" not in worker_voices(reborn.url), "the new process starts without the voice"
        # At once, before the next probe: every request naming the voice is served.
        for _ in range(6):
            response = speak(stack, "latency", voice="keeper")
            assert response.status_code == 200, response.text
        # The restart is noticed (by the request that found the voice missing, or by the
        # new start time on the next probe), the voice replayed, and the worker serves it.
        wait_until(lambda: worker_entry(stack.url, reborn.url)["routable"], 30, "restarted worker routable again")
        assert "keeper" in worker_voices(reborn.url), "routable again only with the voice replayed"
        served_on_ll = wait_until(
            lambda: (r := speak(stack, "latency", voice="keeper")).headers.get("x-gateway-pool") == "low_latency" and r,
            30,
            "a latency request with the voice served by the restarted worker",
        )
        assert served_on_ll.status_code == 200
        assert gateway_metric(stack.url, "higgs_gateway_worker_restarts_total", pool="low_latency") >= restarts_before + 1
        assert worker_entry(stack.url, reborn.url)["restarts"] >= 1
        assert httpx.delete(f"{stack.url}/v1/audio/voices/keeper", timeout=30).status_code == 200
