"""Adaptive routing by prediction: emulated workers behind a real gateway, real clients.

At concurrency 1-4 ``balanced`` traffic stays on low-latency (where it is fastest); at 32
it spreads over both workers and low-latency never carries more than its cap; an operator's change steers the next request and survives a restart; a
worker on a slower GPU is learned as slower and gets less of the work.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import (
    ADMIN,
    LONG_TEXT,
    SHORT_TEXT,
    LoadSampler,
    Routed,
    pools,
    speak,
    speech_body,
    wait_idle,
    worker_id,
)
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


async def closed_loop(url: str, concurrency: int, per_client: int, text: str, sla_class: str = "balanced") -> list[Routed]:
    """``concurrency`` clients, each sending its next request as soon as the last one ends."""
    async with httpx.AsyncClient(timeout=120) as client:

        async def one_client() -> list[Routed]:
            return [await speak(client, url, text, sla_class) for _ in range(per_client)]

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
    assert where == {("low_latency", "fastest_finish"): len(routed)}, (
        f"at concurrency {concurrency} every balanced request belongs on low-latency: {dict(where)}"
    )
    assert sampler.worker_max <= 4, f"low-latency worker carried {sampler.worker_max}"
    await asyncio.to_thread(wait_idle, gateway, workers.urls)


async def test_concurrency_32_uses_both_workers_without_overfilling_low_latency(gateway: str, workers: Workers) -> None:
    with LoadSampler(workers.ll.url, gateway) as sampler:
        routed = await burst(gateway, 32, LONG_TEXT)
    assert all(r.status == 200 for r in routed), [r.status for r in routed]
    assert len({r.audio_bytes for r in routed}) == 1, "every client got the whole clip"
    pools = Counter(r.pool for r in routed)
    # Both workers carry the burst: low-latency is not left idle above a threshold.
    assert pools["high_throughput"] >= 16 and pools["low_latency"] >= 6, dict(pools)
    # Low-latency's cap (its max_num_seqs, 16) is never passed, neither by the gateway's count
    # nor by the worker's own. (No `latency` request came, so no place is reserved for one.)
    assert sampler.gateway_max.get("low_latency", 0) <= 16, sampler.gateway_max
    assert sampler.worker_max <= 16, f"low-latency worker carried {sampler.worker_max} requests at once"
    assert set(r.reason for r in routed) == {"fastest_finish"}
    await asyncio.to_thread(wait_idle, gateway, workers.urls)


def test_responses_carry_the_prediction_behind_the_decision(gateway: str) -> None:
    response = httpx.post(f"{gateway}/v1/audio/speech", json=speech_body(response_format="pcm"), timeout=60)
    assert response.status_code == 200, response.text
    assert 10 < float(response.headers["x-gateway-predicted-ttfp-ms"]) < 10_000
    assert 0.01 < float(response.headers["x-gateway-predicted-rtf"]) < 2.0


def route_of_one(url: str, sla_class: str = "balanced") -> tuple[str, str]:
    response = httpx.post(
        f"{url}/v1/audio/speech", json=speech_body(response_format="pcm"), headers={"x-sla-class": sla_class}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.headers["x-gateway-pool"], response.headers["x-gateway-route-reason"]


def test_a_run_time_change_steers_the_next_request_and_survives_a_restart(tmp_path: Path, workers: Workers) -> None:
    config = gateway_config(tmp_path, [workers.ll.url], [workers.ht.url], free_port())
    with running_gateway(tmp_path, config, name="first") as first:
        assert route_of_one(first.url) == ("low_latency", "fastest_finish")
        bad = httpx.patch(
            f"{first.url}/admin/routing", json={"thresholds": {"max_per_worker": {"low_latency": 0}}}, headers=ADMIN,
            timeout=10,
        )  # fmt: skip
        assert bad.status_code == 400 and "max_per_worker" in bad.json()["error"]["message"], bad.text
        # Reserve every low-latency place for `latency` (pinned: no `latency` traffic came, so
        # the adaptive reserve would be empty): balanced must go elsewhere.
        pin = {"reserve_for_latency": 16, "adaptive_latency_reserve": False}
        patched = httpx.patch(f"{first.url}/admin/routing", json={"thresholds": pin}, headers=ADMIN, timeout=10)
        assert patched.status_code == 200, patched.text
        assert patched.json()["thresholds"]["reserve_for_latency"] == 16
        assert patched.json()["thresholds"]["max_per_worker"] == {}, "the rejected patch changed nothing"
        assert route_of_one(first.url) == ("high_throughput", "fastest_finish")

    # Same config file, same data directory: the operator's change is still in force.
    config["server"]["port"] = free_port()
    with running_gateway(tmp_path, config, name="second") as second:
        routing = httpx.get(f"{second.url}/admin/routing", headers=ADMIN, timeout=10).json()
        assert routing["thresholds"]["reserve_for_latency"] == 16, routing
        assert routing["thresholds"]["adaptive_latency_reserve"] is False, routing
        assert routing["stored_in"] == "file" and routing["persisted_at"].endswith(".json"), routing
        assert route_of_one(second.url) == ("high_throughput", "fastest_finish")
        # The old rule policy is one patch away, and so is the way back.
        rules = httpx.patch(f"{second.url}/admin/routing", json={"policy": "rules"}, headers=ADMIN, timeout=10)
        assert rules.status_code == 200, rules.text
        assert route_of_one(second.url)[1] in {"balanced_under_threshold", "balanced_over_threshold"}
        reset = httpx.patch(
            f"{second.url}/admin/routing", json={"policy": "adaptive", "thresholds": {"reserve_for_latency": 2}},
            headers=ADMIN, timeout=10,
        )  # fmt: skip
        assert reset.status_code == 200, reset.text
        # Back on the adaptive policy (its reason); `latency`, whose pool does not depend on
        # how far this fresh gateway's curves have learned the fast emulated workers yet.
        assert route_of_one(second.url, "latency") == ("low_latency", "fastest_ttfp")


def test_a_slower_worker_is_learned_and_gets_less_work(tmp_path: Path, workers: Workers) -> None:
    """Two high-throughput workers, one on a GPU three times slower: curves differ, load follows.

    Time scales of 0.25 and 0.75 keep both emulators well inside what one core can run,
    so the difference is the modelled GPU's, not the machine's.
    """
    with running_emulator(tmp_path, HT_PROFILE, 0.25, name="ht-fast") as fast, running_emulator(
        tmp_path, HT_PROFILE, 0.75, name="ht-slow"
    ) as slow:
        config = gateway_config(
            tmp_path, [workers.ll.url], [fast.url, slow.url], free_port(),
            # Keep `throughput` off low-latency entirely: the two HT workers are compared.
            extra={"routing": {"thresholds": {"reserve_for_latency": 16, "adaptive_latency_reserve": False}}},
        )  # fmt: skip
        with running_gateway(tmp_path, config) as proc:
            asyncio.run(burst(proc.url, 16, SHORT_TEXT, "throughput"))  # teaches both curves
            fast_id, slow_id = worker_id(proc.url, fast.url), worker_id(proc.url, slow.url)
            curves = {w["id"]: w["curve"] for w in pools(proc.url)["high_throughput"]["workers"]}
            assert curves[slow_id]["step_samples"] > 0 and curves[fast_id]["step_samples"] > 0
            at = {wid: {p["load"]: p for p in curve["points"]} for wid, curve in curves.items()}
            for load in (1, 8):
                assert at[slow_id][load]["rtf"] > 1.5 * at[fast_id][load]["rtf"], (load, at[slow_id][load], at[fast_id][load])
            # With both idle the prior would call them equal; the learned curves do not.
            before = {url: worker_served(url) for url in (fast.url, slow.url)}
            routed = asyncio.run(closed_loop(proc.url, 4, per_client=3, text=SHORT_TEXT, sla_class="throughput"))
            assert all(r.status == 200 for r in routed)
            served = {url: worker_served(url) - before[url] for url in before}
            assert served[fast.url] >= 3 * served[slow.url], served


def worker_served(worker_url: str) -> float:
    text = httpx.get(f"{worker_url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm_omni:speech_stream_completed_total")
    )
