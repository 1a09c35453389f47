"""Audio quality on real emulated workers: a worker that turns noisy under load is heard.

One low-latency and one high-throughput emulated worker behind a gateway that scores every
completed stream. 16 concurrent clients send ``latency`` requests, which low-latency takes
while it has a free slot (it has 16), so it carries more than 8 at once; made noisy
from concurrency 8 (``noisy_from``), it is ejected for ``quality`` with the evidence in
``/admin/pools``, every later request is served clean by high-throughput,
its half-open re-test (probes at the batch it failed at) keeps it out while the fault holds,
and once the fault clears it passes and serves again. A clean fleet under the same load is
never ejected for quality.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gateway.quality.score import Floors, Verdict, score_pcm
from gateway.types import POOL_HEADER
from tests.integration.conftest import SHORT_TEXT, gateway_metric, set_faults, speech_body, wait_until, worker_entry
from tests.support.stack import Stack, running_stack

pytestmark = pytest.mark.timeout(240)

TIME_SCALE = 0.25
# ~14 s of audio: each request lasts about a wall second, so 16 clients keep 16 in flight.
TEXT = " ".join([SHORT_TEXT] * 3)
CONCURRENCY = 16
EXTRA = {
    "quality": {"sample_share": 1.0, "max_per_s": 0, "probe_interval_s": 0, "window": 8, "eject_after_bad": 3},
    "health": {"interval_s": 0.5, "half_open_after_s": 1.0},
}
EJECTIONS = "higgs_gateway_worker_ejections_total"
SAMPLES = "higgs_gateway_quality_samples_total"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("quality"), 1, 1, time_scale=TIME_SCALE, extra=EXTRA) as running:
        yield running


def speak(stack: Stack) -> tuple[str, bytes]:
    response = httpx.post(
        f"{stack.url}/v1/audio/speech", json=speech_body(TEXT, response_format="pcm"), headers={"x-sla-class": "latency"}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.headers[POOL_HEADER], response.content


def load(stack: Stack, requests: int) -> list[tuple[str, bytes]]:
    """``requests`` requests from ``CONCURRENCY`` closed-loop clients, in completion order."""
    with ThreadPoolExecutor(CONCURRENCY) as clients:
        return list(clients.map(lambda _: speak(stack), range(requests)))


def ll_state(stack: Stack) -> dict[str, object]:
    return worker_entry(stack.url, stack.workers["low_latency"][0].url)


def test_a_clean_fleet_under_c16_is_never_ejected_for_quality(stack: Stack) -> None:
    served = load(stack, 64)
    assert "low_latency" in {pool for pool, _ in served}
    wait_until(lambda: gateway_metric(stack.url, SAMPLES) >= 64, 20, "every stream scored")
    assert gateway_metric(stack.url, SAMPLES, verdict="ok") == gateway_metric(stack.url, SAMPLES)
    assert gateway_metric(stack.url, EJECTIONS, reason="quality") == 0
    quality = ll_state(stack)["quality"]
    assert isinstance(quality, dict) and quality["bad_in_window"] == 0 and quality["scored"] >= 32


def test_a_worker_noisy_from_c8_is_ejected_later_requests_are_clean_and_it_returns_when_the_fault_clears(
    stack: Stack,
) -> None:
    ll = stack.workers["low_latency"][0].url
    set_faults(ll, noisy_from=8)
    # 64 requests at c16: four rounds of a 14 s clip, about 30 s of modelled time by the emulator's
    # model; the worker is out at its third noisy stream, long before the last round.
    load(stack, 64)
    entry = wait_until(lambda: (e := ll_state(stack))["state"] == "ejected" and e, 20, "the noisy worker ejected")
    assert gateway_metric(stack.url, EJECTIONS, reason="quality") == 1
    assert str(entry["last_error"]).startswith("quality: ")
    ejection = entry["quality"]["ejection"]  # type: ignore[index]
    assert len(ejection["evidence"]) == 3  # out at its third noisy stream
    assert {e["verdict"] for e in ejection["evidence"]} == {"noisy"}
    assert all(e["hnr_db"] < -2.0 for e in ejection["evidence"]) and max(e["batch"] for e in ejection["evidence"]) >= 8
    assert gateway_metric(stack.url, SAMPLES, pool="low_latency", verdict="noisy") >= 3

    # Out of routing: everything is high-throughput's, and clean. Its half-open re-tests meanwhile
    # (one good /health each second) probe it at the batch it failed at, and fail.
    served = load(stack, 48)
    assert {pool for pool, _ in served} == {"high_throughput"}
    assert all(score_pcm(pcm).verdict(Floors()) is Verdict.OK for _, pcm in served)
    wait_until(lambda: "readmission" in ll_state(stack)["quality"], 20, "a half-open re-test ran")  # type: ignore[operator]
    entry = ll_state(stack)
    assert entry["state"] == "ejected" and entry["quality"]["readmission"]["passed"] is False  # type: ignore[index]

    set_faults(ll, clear=True)
    entry = wait_until(lambda: (e := ll_state(stack))["state"] == "ready" and e, 30, "back once the fault cleared")
    assert entry["quality"]["readmission"]["passed"] is True  # type: ignore[index]
    served = load(stack, 48)
    assert "low_latency" in {pool for pool, _ in served}
    assert all(score_pcm(pcm).verdict(Floors()) is Verdict.OK for _, pcm in served)
    assert gateway_metric(stack.url, EJECTIONS, reason="quality") == 1
