"""Reliability, worker failures before the first byte: 500/502/503 and silence.

The only low-latency worker is a stub on a real socket that answers speech requests with
whatever status the test sets (or says nothing), and records every request it gets; the
high-throughput worker is a real emulated one. A ``latency`` request always tries the
low-latency worker first, so each case is deterministic:

* another worker can serve: the client gets the whole clip, never the failure, and
  ``higgs_gateway_retries_total`` counts the retry;
* nothing else can serve: the client gets the OpenAI envelope with the right status
  (503 + Retry-After, 502, 504) and no retry is attempted;
* an ejected worker is probed only once per half-open period and gets no user request.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.integration.conftest import (
    ADMIN,
    SHORT_TEXT,
    gateway_metric,
    speech_body,
    wait_idle,
    wait_until,
    worker_entry,
    worker_pcm,
)
from tests.integration.reliability_support import StubWorker, stub_worker
from tests.support.procs import Proc, free_port, running_emulator
from tests.support.stack import HT_PROFILE, gateway_config, running_gateway

RETRIES = "higgs_gateway_retries_total"
UPSTREAM_ERRORS = "higgs_gateway_upstream_errors_total"
EJECTIONS = "higgs_gateway_worker_ejections_total"
FIRST_BYTE_TIMEOUT_S = 1.5
HALF_OPEN_S = 1.0
EXTRA = {
    "upstream": {"first_byte_timeout_s": FIRST_BYTE_TIMEOUT_S},
    # Three ejecting failures in a row: the single 500 and 502 of a test never eject.
    "health": {"interval_s": 0.5, "half_open_after_s": HALF_OPEN_S, "eject_after_failures": 3},
}


@dataclass
class Rig:
    gateway: Proc
    stub: StubWorker
    ht: Proc

    @property
    def url(self) -> str:
        return self.gateway.url


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("upstream")
    with stub_worker() as stub, running_emulator(tmp, HT_PROFILE, 0.02, name="ht") as ht:
        config = gateway_config(tmp, [stub.url], [ht.url], free_port(), EXTRA)
        with running_gateway(tmp, config) as gateway:
            yield Rig(gateway, stub, ht)


@pytest.fixture
def steady(rig: Rig) -> Iterator[Rig]:
    """Each test starts and ends with the stub healthy, routable and without failures."""
    rig.stub.behaviour.speech_status, rig.stub.behaviour.hang_s, rig.stub.behaviour.health_status = 500, 0.0, 200
    settle(rig)
    yield rig
    rig.stub.behaviour.hang_s, rig.stub.behaviour.health_status = 0.0, 200
    settle(rig)
    wait_idle(rig.url, [rig.ht.url])


def settle(rig: Rig) -> None:
    wait_until(
        lambda: (w := worker_entry(rig.url, rig.stub.url))["routable"] and w["consecutive_failures"] == 0,
        30,
        "the stub worker routable with no failure counted (a health probe resets the count)",
    )


def latency_request(rig: Rig) -> httpx.Response:
    return httpx.post(
        f"{rig.url}/v1/audio/speech",
        json=speech_body(response_format="pcm"),
        headers={"x-sla-class": "latency"},
        timeout=60,
    )


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, f"expected {status} {code}, got {response.status_code}: {response.text}"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["code"] == code and error["type"] == "server_error", error
    return error


@pytest.mark.parametrize("status", [503, 500, 502])
def test_a_5xx_before_the_first_byte_is_hidden_by_another_worker(steady: Rig, status: int) -> None:
    rig = steady
    reference = worker_pcm(rig.ht.url, SHORT_TEXT)
    rig.stub.behaviour.speech_status = status
    tried_before = len(rig.stub.speech_requests())
    retries_before = gateway_metric(rig.url, RETRIES, reason="status_5xx")
    errors_before = gateway_metric(rig.url, UPSTREAM_ERRORS, pool="low_latency", kind="status_5xx")

    response = latency_request(rig)

    assert response.status_code == 200, f"the worker's {status} reached the client: {response.text}"
    assert response.content == reference, "the client got the whole clip from the other worker"
    assert response.headers["x-gateway-route-reason"] == "retry_other_worker"
    assert response.headers["x-gateway-pool"] == "high_throughput"
    assert len(rig.stub.speech_requests()) == tried_before + 1, "the failing worker was tried exactly once"
    assert gateway_metric(rig.url, RETRIES, reason="status_5xx") == retries_before + 1
    assert gateway_metric(rig.url, UPSTREAM_ERRORS, pool="low_latency", kind="status_5xx") == errors_before + 1
    wait_until(lambda: worker_entry(rig.url, rig.stub.url)["inflight"] == 0, 10, "the failed attempt's lease released")


def test_a_5xx_with_no_other_worker_is_an_envelope_not_a_hang(steady: Rig) -> None:
    rig = steady
    ht_id = worker_entry(rig.url, rig.ht.url)["id"]
    assert httpx.post(f"{rig.url}/admin/workers/{ht_id}/drain", headers=ADMIN, timeout=10).status_code == 200
    try:
        retries_before = sum(gateway_metric(rig.url, RETRIES, reason=r) for r in ("status_5xx", "first_byte_timeout"))

        rig.stub.behaviour.speech_status = 503
        busy = latency_request(rig)
        assert_envelope(busy, 503, "upstream_unavailable")
        assert busy.headers.get("retry-after"), "a 503 always tells the client when to come back"

        settle(rig)
        rig.stub.behaviour.speech_status = 502
        assert_envelope(latency_request(rig), 502, "upstream_error")

        settle(rig)
        rig.stub.behaviour.hang_s = FIRST_BYTE_TIMEOUT_S + 3.0
        assert_envelope(latency_request(rig), 504, "upstream_timeout")

        retries_after = sum(gateway_metric(rig.url, RETRIES, reason=r) for r in ("status_5xx", "first_byte_timeout"))
        assert retries_after == retries_before, "with no other worker free there is nothing to retry on"
        wait_until(lambda: worker_entry(rig.url, rig.stub.url)["inflight"] == 0, 10, "every lease released")
    finally:
        httpx.post(f"{rig.url}/admin/workers/{ht_id}/undrain", headers=ADMIN, timeout=10)


def test_a_silent_worker_hits_the_first_byte_timeout_and_is_retried(steady: Rig) -> None:
    rig = steady
    reference = worker_pcm(rig.ht.url, SHORT_TEXT)
    rig.stub.behaviour.hang_s = FIRST_BYTE_TIMEOUT_S + 3.0
    retries_before = gateway_metric(rig.url, RETRIES, reason="first_byte_timeout")
    errors_before = gateway_metric(rig.url, UPSTREAM_ERRORS, pool="low_latency", kind="first_byte_timeout")

    response = latency_request(rig)

    assert response.status_code == 200, response.text
    assert response.content == reference
    assert response.headers["x-gateway-route-reason"] == "retry_other_worker"
    assert gateway_metric(rig.url, RETRIES, reason="first_byte_timeout") == retries_before + 1
    assert gateway_metric(rig.url, UPSTREAM_ERRORS, pool="low_latency", kind="first_byte_timeout") == errors_before + 1


def test_an_ejected_worker_gets_only_half_open_probes_and_no_requests(steady: Rig) -> None:
    rig = steady
    ejections_before = gateway_metric(rig.url, EJECTIONS, pool="low_latency", reason="health_probe")
    rig.stub.behaviour.health_status = 503
    wait_until(lambda: worker_entry(rig.url, rig.stub.url)["state"] == "ejected", 30, "ejected after failed probes")
    ejected_at = time.monotonic()
    speech_before = len(rig.stub.speech_requests())

    for sla_class in ("latency", "balanced", "latency"):
        response = httpx.post(
            f"{rig.url}/v1/audio/speech",
            json=speech_body(response_format="pcm"),
            headers={"x-sla-class": sla_class},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert response.headers["x-gateway-pool"] == "high_throughput"
        assert response.headers["x-gateway-route-reason"] == "no_ll_workers"
    # Long enough for several half-open periods (a ready worker would be probed every 0.5 s).
    wait_until(
        lambda: len([s for s in rig.stub.requests("/health") if s.at > ejected_at]) >= 3,
        30,
        "half-open probes keep coming while the worker is ejected",
    )
    assert worker_entry(rig.url, rig.stub.url)["state"] == "ejected", "failed half-open probes keep it out"
    assert len(rig.stub.speech_requests()) == speech_before, "no user request reached the ejected worker"
    probes = [s.at for s in rig.stub.requests("/health") if s.at > ejected_at]
    gaps = [later - earlier for earlier, later in zip(probes, probes[1:], strict=False)]
    assert gaps and min(gaps) >= HALF_OPEN_S * 0.9, (
        f"an ejected worker is probed once per half-open period ({HALF_OPEN_S} s), not hammered: gaps {gaps}"
    )
    assert gateway_metric(rig.url, EJECTIONS, pool="low_latency", reason="health_probe") == ejections_before + 1

    rig.stub.behaviour.health_status = 200  # the next half-open probe succeeds: back in routing
    wait_until(lambda: worker_entry(rig.url, rig.stub.url)["routable"], 30, "recovered after a good half-open probe")
    rig.stub.behaviour.speech_status = 503
    response = latency_request(rig)
    assert len(rig.stub.speech_requests()) == speech_before + 1, "the recovered worker is routed to again"
    assert response.status_code == 200 and response.headers["x-gateway-route-reason"] == "retry_other_worker"
