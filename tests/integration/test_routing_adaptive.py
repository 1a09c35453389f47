"""Adaptive routing by live concurrency: one low-latency and one high-throughput emulated
worker behind a real gateway, driven by concurrent real clients.

At concurrency 1-4 ``balanced`` traffic stays on low-latency (where it is fastest); at 32
most of it goes to high-throughput and low-latency never carries more than its 4 slots;
an operator's threshold change steers the next request and survives a gateway restart.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import ADMIN, LONG_TEXT, SHORT_TEXT, LoadSampler, Routed, speak, speech_body, wait_idle
from tests.support.procs import Proc, free_port, running_emulator
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway

TIME_SCALE = 0.1
MEDIUM_TEXT = f"{SHORT_TEXT} {SHORT_TEXT}"  # ~9 s of audio: a few hundred ms per request here


@dataclass
class Workers:
    ll: Proc
    ht: Proc

    @property
    def urls(self) -> list[str]:
        return [self.ll.url, self.ht.url]


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    tmp = tmp_path_factory.mktemp("adaptive-workers")
    with running_emulator(tmp, LL_PROFILE, TIME_SCALE, name="ll") as ll, running_emulator(
        tmp, HT_PROFILE, TIME_SCALE, name="ht"
    ) as ht:
        yield Workers(ll, ht)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, workers: Workers) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("adaptive-gateway")
    config = gateway_config(tmp, [workers.ll.url], [workers.ht.url], free_port())
    with running_gateway(tmp, config) as proc:
        yield proc.url


async def closed_loop(url: str, concurrency: int, per_client: int, text: str) -> list[Routed]:
    """``concurrency`` clients, each sending its next request as soon as the last one ends."""
    async with httpx.AsyncClient(timeout=120) as client:

        async def one_client() -> list[Routed]:
            return [await speak(client, url, text) for _ in range(per_client)]

        results = await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return [routed for batch in results for routed in batch]


async def burst(url: str, count: int, text: str, sla_class: str = "balanced") -> list[Routed]:
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=count)) as client:
        return list(await asyncio.gather(*(speak(client, url, text, sla_class) for _ in range(count))))


@pytest.mark.parametrize("concurrency", [1, 2, 3, 4])
async def test_balanced_stays_on_low_latency_up_to_concurrency_4(gateway: str, workers: Workers, concurrency: int) -> None:
    with LoadSampler(workers.ll.url, gateway) as sampler:
        routed = await closed_loop(gateway, concurrency, per_client=4, text=MEDIUM_TEXT)
    assert all(r.status == 200 and r.audio_bytes > 0 for r in routed), routed
    where = Counter((r.pool, r.reason) for r in routed)
    assert where == {("low_latency", "balanced_under_threshold"): len(routed)}, (
        f"at concurrency {concurrency} every balanced request belongs on low-latency: {dict(where)}"
    )
    assert sampler.worker_max <= 4, f"low-latency worker carried {sampler.worker_max}"
    await asyncio.to_thread(wait_idle, gateway, workers.urls)


async def test_concurrency_32_goes_to_high_throughput_without_overfilling_low_latency(
    gateway: str, workers: Workers
) -> None:
    with LoadSampler(workers.ll.url, gateway) as sampler:
        routed = await burst(gateway, 32, LONG_TEXT)
    assert all(r.status == 200 for r in routed), [r.status for r in routed]
    assert len({r.audio_bytes for r in routed}) == 1, "every client got the whole clip"
    pools = Counter(r.pool for r in routed)
    assert pools["high_throughput"] >= 24, f"most of 32 concurrent requests belong on high-throughput: {dict(pools)}"
    assert pools["low_latency"] <= 8, dict(pools)
    # Nobody waited behind a full low-latency worker: it never held more than its 4 slots,
    # neither by the gateway's count nor by the worker's own.
    assert sampler.gateway_max.get("low_latency", 0) <= 4, sampler.gateway_max
    assert sampler.worker_max <= 4, f"low-latency worker carried {sampler.worker_max} requests at once"
    reasons = Counter(r.reason for r in routed)
    assert set(reasons) <= {"balanced_under_threshold", "balanced_over_threshold"}, dict(reasons)
    await asyncio.to_thread(wait_idle, gateway, workers.urls)


def route_of_one(url: str) -> tuple[str, str]:
    response = httpx.post(f"{url}/v1/audio/speech", json=speech_body(response_format="pcm"), timeout=60)
    assert response.status_code == 200, response.text
    return response.headers["x-gateway-pool"], response.headers["x-gateway-route-reason"]


def test_threshold_change_steers_the_next_request_and_survives_a_restart(tmp_path: Path, workers: Workers) -> None:
    config = gateway_config(tmp_path, [workers.ll.url], [workers.ht.url], free_port())
    with running_gateway(tmp_path, config, name="first") as first:
        assert route_of_one(first.url) == ("low_latency", "balanced_under_threshold")
        bad = httpx.patch(
            f"{first.url}/admin/routing", json={"thresholds": {"balanced_hysteresis": -1}}, headers=ADMIN, timeout=10
        )
        assert bad.status_code == 400 and "balanced_hysteresis" in bad.json()["error"]["message"], bad.text
        patched = httpx.patch(
            f"{first.url}/admin/routing", json={"thresholds": {"balanced_threshold": 0}}, headers=ADMIN, timeout=10
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["thresholds"]["balanced_threshold"] == 0
        assert patched.json()["thresholds"]["balanced_hysteresis"] == 2, "the rejected patch changed nothing"
        assert route_of_one(first.url) == ("high_throughput", "balanced_over_threshold")

    # Same config file, same data directory: the operator's change is still in force.
    config["server"]["port"] = free_port()
    with running_gateway(tmp_path, config, name="second") as second:
        routing = httpx.get(f"{second.url}/admin/routing", headers=ADMIN, timeout=10).json()
        assert routing["thresholds"]["balanced_threshold"] == 0, routing
        assert route_of_one(second.url) == ("high_throughput", "balanced_over_threshold")
        # Back to the default (null = the low-latency pool's capacity).
        reset = httpx.patch(
            f"{second.url}/admin/routing", json={"thresholds": {"balanced_threshold": None}}, headers=ADMIN, timeout=10
        )
        assert reset.status_code == 200, reset.text
        assert route_of_one(second.url) == ("low_latency", "balanced_under_threshold")
