"""Gateway core, failures before the first byte: a worker answering 500 or not answering
at all is hidden from the client by another worker (retry before the first byte only).

Two low-latency workers and one high-throughput worker; ``latency`` requests target the
low-latency pool, whose two idle workers are picked in turn.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.integration.conftest import (
    SHORT_TEXT,
    gateway_metric,
    set_faults,
    speech_body,
    wait_idle,
    wait_until,
    worker_entry,
    worker_pcm,
)
from tests.support.stack import Stack, running_stack

RETRIES = "higgs_gateway_retries_total"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("failover"), ll_workers=2, ht_workers=1, time_scale=0.02) as running:
        yield running


def latency_request(stack: Stack) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/audio/speech",
        json=speech_body(response_format="pcm"),
        headers={"x-sla-class": "latency"},
        timeout=60,
    )


def test_a_failing_worker_is_retried_on_another(stack: Stack) -> None:
    failing, healthy = (proc.url for proc in stack.workers["low_latency"])
    reference = worker_pcm(healthy, SHORT_TEXT)
    retries_before = gateway_metric(stack.url, RETRIES, reason="status_5xx")
    set_faults(failing, fail_next=1)
    responses = []
    try:
        # Idle workers are taken in turn: the failing one is picked within two requests.
        for _ in range(4):
            responses.append(latency_request(stack))
            if httpx.get(f"{failing}/emulator/faults", timeout=10).json()["fail_next"] == 0:
                break
        assert httpx.get(f"{failing}/emulator/faults", timeout=10).json()["fail_next"] == 0, (
            "the gateway never sent a request to the failing worker"
        )
    finally:
        set_faults(failing, clear=True)
    for response in responses:
        assert response.status_code == 200, response.text
        assert response.content == reference, "the client got the whole clip, as if nothing failed"
    retried = [r for r in responses if r.headers["x-gateway-route-reason"] == "retry_other_worker"]
    assert len(retried) == 1, [r.headers["x-gateway-route-reason"] for r in responses]
    assert retried[0].headers["x-gateway-pool"] == "low_latency", "retries stay in the request's pool first"
    assert gateway_metric(stack.url, RETRIES, reason="status_5xx") == retries_before + 1
    # One 500 is not enough to eject a worker.
    assert worker_entry(stack.url, failing)["state"] == "ready"
    wait_idle(stack.url, [failing, healthy])


def test_a_dead_worker_is_skipped(stack: Stack) -> None:
    """Runs last in this module: it kills a worker."""
    dead_proc, alive_proc = stack.workers["low_latency"]
    # Refused (connect), or a pooled connection that breaks before any audio (stream_error).
    def dead_worker_retries() -> float:
        return sum(gateway_metric(stack.url, RETRIES, reason=reason) for reason in ("connect", "stream_error"))

    retries_before = dead_worker_retries()
    dead_proc.popen.kill()  # no goodbye: connections are refused from now on
    dead_proc.popen.wait(10)
    assert worker_entry(stack.url, dead_proc.url)["routable"], "the gateway has not noticed yet"

    for _ in range(6):
        response = latency_request(stack)
        assert response.status_code == 200, response.text
        assert response.headers["x-gateway-pool"] == "low_latency"
    # At least one request met the dead worker and was retried on the live one...
    # (unless the health checker ejected it before any request met it: both are correct)
    assert dead_worker_retries() >= retries_before + 1 or not worker_entry(stack.url, dead_proc.url)["routable"]
    # ...and the dead worker leaves routing.
    wait_until(
        lambda: not worker_entry(stack.url, dead_proc.url)["routable"], 30, "the dead worker is ejected"
    )
    wait_idle(stack.url, [alive_proc.url])
