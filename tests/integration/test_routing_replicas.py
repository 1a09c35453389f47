"""Two gateway replicas in front of the same workers: each learns the other's load from the
workers' own ``/load`` reports, so together they keep the low-latency worker at its 4 slots
instead of each filling it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import SHORT_TEXT, LoadSampler, speech_body, wait_idle, wait_until, worker_entry
from tests.support.procs import Proc, free_port, running_emulator
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway

TIME_SCALE = 0.1
VERY_LONG_TEXT = " ".join([SHORT_TEXT] * 18)  # ~80 s of audio: seconds per request here
LL_SLOTS = 4
# Reports are polled every 0.25 s: a request or so may slip in between two reports.
MARGIN = 1


@dataclass
class Replicas:
    ll: Proc
    ht: Proc
    first: Proc
    second: Proc


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    tmp: Path = tmp_path_factory.mktemp("replicas")
    with running_emulator(tmp, LL_PROFILE, TIME_SCALE, name="ll") as ll, running_emulator(
        tmp, HT_PROFILE, TIME_SCALE, name="ht"
    ) as ht:
        first_dir, second_dir = tmp / "first", tmp / "second"
        first_dir.mkdir()
        second_dir.mkdir()
        cap = {"pools": {"low_latency": {"slots_per_worker": LL_SLOTS}}}
        first_config = gateway_config(first_dir, [ll.url], [ht.url], free_port(), cap)
        second_config = gateway_config(second_dir, [ll.url], [ht.url], free_port(), cap)
        with running_gateway(first_dir, first_config, name="first") as first, running_gateway(
            second_dir, second_config, name="second"
        ) as second:
            yield Replicas(ll, ht, first, second)


async def speak(client: httpx.AsyncClient, url: str) -> tuple[int, str | None, str | None]:
    async with client.stream(
        "POST",
        f"{url}/v1/audio/speech",
        json=speech_body(VERY_LONG_TEXT, response_format="pcm"),
        headers={"x-sla-class": "latency"},
    ) as response:
        async for _ in response.aiter_bytes():
            pass
        return response.status_code, response.headers.get("x-gateway-pool"), response.headers.get("x-gateway-route-reason")


async def test_replicas_share_the_low_latency_slots(replicas: Replicas) -> None:
    ll_url = replicas.ll.url
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=32)) as client:
        with LoadSampler(ll_url) as sampler:
            # The first replica fills the low-latency worker (the rest of its burst spills).
            first = [asyncio.create_task(speak(client, replicas.first.url)) for _ in range(6)]
            await asyncio.to_thread(
                wait_until,
                lambda: worker_entry(replicas.second.url, ll_url)["reported_load"] == LL_SLOTS,
                30,
                "the second replica sees the first one's 4 requests in the worker's report",
            )
            # The second replica carries nothing yet; it must not add its own 4 on top.
            second = [asyncio.create_task(speak(client, replicas.second.url)) for _ in range(6)]
            first_results = await asyncio.gather(*first)
            second_results = await asyncio.gather(*second)
    assert all(status == 200 for status, _, _ in first_results + second_results)
    first_pools = Counter(pool for _, pool, _ in first_results)
    assert first_pools["low_latency"] == LL_SLOTS, dict(first_pools)
    second_where = Counter((pool, reason) for _, pool, reason in second_results)
    assert second_where[("low_latency", "fastest_ttfp")] <= MARGIN, (
        f"the second replica put {second_where} on a worker the first had filled"
    )
    assert sampler.worker_max <= LL_SLOTS + MARGIN, (
        f"low-latency worker carried {sampler.worker_max} requests with two replicas (slots: {LL_SLOTS})"
    )
    for gateway in (replicas.first.url, replicas.second.url):
        await asyncio.to_thread(wait_idle, gateway, [ll_url, replicas.ht.url])
