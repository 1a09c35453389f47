"""Gateway replicas on one real Redis share their in-flight work: each sees the other's
leases at once, a replica killed with SIGKILL leaves no load behind after the stated bound,
and with Redis gone each keeps serving on its own view, says so, and rejoins."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import ADMIN, LONG_TEXT, gateway_metric, speech_body, wait_until, worker_id
from tests.support.procs import Proc, free_port, running_emulator
from tests.support.redis_server import RedisServer, running_redis
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway

TIME_SCALE = 3.0  # streams long enough (tens of seconds) to be seen while they run
TEXT = LONG_TEXT  # about 20 s of streaming at this scale
LEASE_TTL_S = 3.0
# A dead replica's leases: expired after the TTL, gone from a view at its next heartbeat.
DEAD_REPLICA_BOUND_S = LEASE_TTL_S + LEASE_TTL_S / 3
LL_SLOTS = 1  # one low-latency slot for the whole fleet: a second hand-out would show


@dataclass
class Fleet:
    redis: RedisServer
    ll: Proc
    first: Proc
    second: Proc
    tmp: Path
    config: dict[str, Any]


def extra(redis: RedisServer) -> dict[str, Any]:
    return {
        "state": {
            "backend": "redis",
            "redis_url": redis.url,
            "key_prefix": "inflight-it:",
            "reconnect_max_backoff_s": 0.5,
            "inflight_lease_ttl_s": LEASE_TTL_S,
        },
    }


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp: Path = tmp_path_factory.mktemp("inflight-replicas")
    with running_redis(tmp / "redis") as redis, running_emulator(
        tmp, LL_PROFILE, TIME_SCALE, name="ll"
    ) as ll, running_emulator(tmp, HT_PROFILE, TIME_SCALE, name="ht") as ht:
        configs = {}
        for name in ("first", "second", "third"):
            (tmp / name).mkdir()
            configs[name] = gateway_config(tmp / name, [ll.url], [ht.url], free_port(), extra(redis))
            configs[name]["pools"]["low_latency"]["slots_per_worker"] = LL_SLOTS
        with running_gateway(tmp / "first", configs["first"], name="first") as first, running_gateway(
            tmp / "second", configs["second"], name="second"
        ) as second:
            wait_until(lambda: all(shared(g.url) for g in (first, second)), 20, "both replicas share their view")
            yield Fleet(redis, ll, first, second, tmp, configs["third"])


def pools(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/admin/pools", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def shared(url: str) -> bool:
    return bool(pools(url).get("fleet_view", {}).get("shared"))


def others_on(url: str, wid: str) -> int | None:
    workers = pools(url)["pools"]["low_latency"]["workers"]
    return next(w["other_replicas_inflight"] for w in workers if w["id"] == wid)


@asynccontextmanager
async def streaming(url: str) -> AsyncIterator[None]:
    """A `latency` stream held open (its first bytes read) until the block ends."""
    async with httpx.AsyncClient(timeout=60) as client, client.stream(
        "POST",
        f"{url}/v1/audio/speech",
        json=speech_body(TEXT, response_format="pcm"),
        headers={"x-sla-class": "latency"},
    ) as response:
        assert response.status_code == 200
        assert response.headers["x-gateway-pool"] == "low_latency"
        chunks = response.aiter_bytes()  # kept referenced: a collected iterator closes the stream
        await anext(chunks)
        yield


async def test_a_lease_on_one_replica_is_counted_by_the_other_within_milliseconds(fleet: Fleet) -> None:
    wid = worker_id(fleet.first.url, fleet.ll.url)
    assert others_on(fleet.second.url, wid) == 0
    async with streaming(fleet.first.url):
        started = time.monotonic()
        await asyncio.to_thread(wait_until, lambda: others_on(fleet.second.url, wid) == 1, 5, "seen by the second", 0.001)
        print(f"the first replica's lease counted by the second within {1000 * (time.monotonic() - started):.1f} ms")
        assert others_on(fleet.first.url, wid) == 0  # its own lease is in its inflight
        assert pools(fleet.first.url)["pools"]["low_latency"]["inflight"] == 1
        view = pools(fleet.first.url)["fleet_view"]
        assert view["reservations"] >= 1 and view["peak_fleet_leases"][wid] >= 1 and view["redecided"] >= 0
    await asyncio.to_thread(wait_until, lambda: others_on(fleet.second.url, wid) == 0, 5, "its release seen")


async def test_the_one_low_latency_slot_goes_to_one_request_of_the_whole_fleet(fleet: Fleet) -> None:
    """Six `latency` streams at once, three through each replica, each far longer than the
    burst: had both replicas handed out the slot, two would be on low-latency together."""
    replicas = (fleet.first, fleet.second)
    all_routed = asyncio.Event()

    def routed() -> int:
        return sum(pools(g.url)["pools"][p]["inflight"] for g in replicas for p in ("low_latency", "high_throughput"))

    async with httpx.AsyncClient(timeout=60) as client:

        async def pool_of(url: str) -> str:
            async with client.stream(
                "POST", f"{url}/v1/audio/speech", json=speech_body(TEXT, response_format="pcm"),
                headers={"x-sla-class": "latency"},
            ) as response:  # fmt: skip
                assert response.status_code == 200
                await all_routed.wait()  # every stream stays open until all six hold a slot
                return str(response.headers["x-gateway-pool"])

        tasks = [asyncio.ensure_future(pool_of(g.url)) for _ in range(3) for g in replicas]
        await asyncio.to_thread(wait_until, lambda: routed() == len(tasks), 30, "all six routed")
        all_routed.set()
        chosen = await asyncio.gather(*tasks)
    assert chosen.count("low_latency") == 1, chosen


async def test_a_replica_killed_mid_stream_leaves_no_load_after_the_bound(fleet: Fleet) -> None:
    wid = worker_id(fleet.first.url, fleet.ll.url)
    with running_gateway(fleet.tmp / "third", fleet.config, name="third") as third:
        await asyncio.to_thread(wait_until, lambda: shared(third.url), 20, "the third replica shares its view")
        client = httpx.AsyncClient(timeout=60)
        try:
            async with client.stream(
                "POST",
                f"{third.url}/v1/audio/speech",
                json=speech_body(TEXT, response_format="pcm"),
                headers={"x-sla-class": "latency"},
            ) as response:
                assert response.headers["x-gateway-pool"] == "low_latency"
                chunks = response.aiter_bytes()
                await anext(chunks)
                await asyncio.to_thread(wait_until, lambda: others_on(fleet.first.url, wid) == 1, 5, "seen by the first")
                third.popen.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                await asyncio.to_thread(third.popen.wait, 10)
                await asyncio.to_thread(
                    wait_until,
                    lambda: others_on(fleet.first.url, wid) == 0 and others_on(fleet.second.url, wid) == 0,
                    DEAD_REPLICA_BOUND_S + 2.0,
                    "the dead replica's lease gone from every survivor's view",
                    0.02,
                )
                gone_after = time.monotonic() - killed
        except httpx.HTTPError:
            pass  # the dead replica's stream breaks: expected
        finally:
            await client.aclose()
    print(f"a SIGKILLed replica's lease gone from both survivors' views {gone_after:.2f} s after the kill")
    assert LEASE_TTL_S - 1.0 <= gone_after <= DEAD_REPLICA_BOUND_S + 0.5
    # The survivors serve on as before.
    async with streaming(fleet.second.url):
        pass


def test_redis_down_each_replica_routes_on_its_own_view_says_so_and_rejoins(fleet: Fleet) -> None:
    logged_before = {g.url: len(g.log().splitlines()) for g in (fleet.first, fleet.second)}
    fleet.redis.kill()
    try:
        for g in (fleet.first, fleet.second):
            wait_until(lambda g=g: not shared(g.url), 10, f"{g.url} degraded")
            assert gateway_metric(g.url, "higgs_gateway_fleet_view_shared") == 0
            response = httpx.post(
                f"{g.url}/v1/audio/speech",
                json=speech_body("Still speaking.", response_format="pcm"),
                headers={"x-sla-class": "latency"},
                timeout=30,
            )
            assert response.status_code == 200, response.text
    finally:
        fleet.redis.start()
    for g in (fleet.first, fleet.second):
        wait_until(lambda g=g: shared(g.url), 20, f"{g.url} rejoined")
        assert gateway_metric(g.url, "higgs_gateway_fleet_view_shared") == 1
        lines = g.log().splitlines()[logged_before[g.url] :]
        assert sum(1 for line in lines if "fleet view of in-flight work lost" in line) == 1, "logged once"


def first_byte_s(url: str) -> float:
    started = time.monotonic()
    with httpx.stream(
        "POST", f"{url}/v1/audio/speech", json=speech_body("Still speaking.", response_format="pcm"),
        headers={"x-sla-class": "latency"}, timeout=30,
    ) as response:  # fmt: skip
        assert response.status_code == 200
        next(response.iter_raw())
        return time.monotonic() - started


def test_a_hung_redis_holds_no_speech_up(fleet: Fleet) -> None:
    """Redis frozen (SIGSTOP: connections open, nothing answers): a request waits at most
    state.inflight_timeout_s (0.1 s) once, then routes on the replica's own view until it thaws."""
    proc = fleet.redis._proc
    assert proc is not None
    before = min(first_byte_s(fleet.first.url) for _ in range(3))
    proc.send_signal(signal.SIGSTOP)
    try:
        frozen = [first_byte_s(fleet.first.url) for _ in range(3)]
        print(f"first byte: {before * 1000:.0f} ms before, " + ", ".join(f"{t * 1000:.0f}" for t in frozen) + " ms frozen")
        assert max(frozen) < before + 1.0  # never a Redis timeout per request, let alone a hang
        wait_until(lambda: not shared(fleet.first.url), 10, "degraded while Redis is frozen")
    finally:
        proc.send_signal(signal.SIGCONT)
    wait_until(lambda: shared(fleet.first.url), 20, "rejoined once Redis answers")
