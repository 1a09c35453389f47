"""Two gateway replicas on one real Redis, in front of the same emulated workers: an
operator change made through either is applied by both, a voice uploaded through one is
spoken through the other, one API key is held to one fleet-wide limit, and a Redis
outage stops no speech (admin writes answer 503 until it is back)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.security.auth import hash_key
from tests.integration.conftest import ADMIN, LONG_TEXT, SHORT_TEXT, gateway_metric, speech_body, wait_until, worker_id
from tests.support.audio import reference_wav
from tests.support.procs import Proc, free_port, running_emulator
from tests.support.redis_server import RedisServer, running_redis
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway

TIME_SCALE = 0.1
KEY = "hgw-state-test-key"
RATE_KEY = "hgw-state-rate-key"
RATE_RPS, RATE_BURST = 10.0, 30
STREAM_KEY = "hgw-state-one-stream-key"  # a tier with one concurrent stream, fleet-wide
AUTH = {"Authorization": f"Bearer {KEY}"}
LL_DEFAULT_SLOTS = 4  # pools.low_latency.slots_per_worker left at its default


@dataclass
class Fleet:
    redis: RedisServer
    ll: Proc
    ht: Proc
    first: Proc
    second: Proc

    @property
    def replicas(self) -> tuple[Proc, Proc]:
        return self.first, self.second


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp: Path = tmp_path_factory.mktemp("state-replicas")
    with running_redis(tmp / "redis") as redis, running_emulator(
        tmp, LL_PROFILE, TIME_SCALE, name="ll"
    ) as ll, running_emulator(tmp, HT_PROFILE, TIME_SCALE, name="ht") as ht:
        extra: dict[str, Any] = {
            "state": {
                "backend": "redis",
                "redis_url": redis.url,
                "key_prefix": "it:",
                "reconnect_max_backoff_s": 0.5,
                "resync_interval_s": 2.0,
            },
            "auth": {
                "api_key_sha256": [hash_key(KEY), hash_key(RATE_KEY)],
                "rate_limit_rps": RATE_RPS,
                "rate_limit_burst": RATE_BURST,
                "open_listings": True,  # the tests poll listings; only /v1 calls with a body spend tokens
                "tiers": {"one-stream": {"max_concurrent_streams": 1}},
                "keys": [{"name": "one-stream-tenant", "sha256": hash_key(STREAM_KEY), "tier": "one-stream"}],
            },
        }
        dirs = [tmp / "first", tmp / "second"]
        configs = []
        for directory in dirs:
            directory.mkdir()
            configs.append(gateway_config(directory, [ll.url], [ht.url], free_port(), extra))
        with running_gateway(dirs[0], configs[0], name="first") as first, running_gateway(
            dirs[1], configs[1], name="second"
        ) as second:
            yield Fleet(redis, ll, ht, first, second)


def routing(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/admin/routing", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def patch_routing(url: str, patch: dict[str, Any]) -> httpx.Response:
    return httpx.patch(f"{url}/admin/routing", json=patch, headers=ADMIN, timeout=10)


def speak(url: str, sla: str = "balanced", **fields: Any) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/audio/speech",
        json=speech_body(SHORT_TEXT, response_format="pcm", **fields),
        headers={**AUTH, "x-sla-class": sla},
        timeout=60,
    )


def upload(url: str, name: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/audio/voices",
        data={"name": name, "consent": "true"},
        files={"audio_sample": (f"{name}.wav", reference_wav(), "audio/wav")},
        headers=AUTH,
        timeout=30,
    )


def voice_names(url: str) -> set[str]:
    response = httpx.get(f"{url}/v1/audio/voices", headers=AUTH, timeout=10)  # a key's voices are its own
    assert response.status_code == 200, response.text
    return {v["name"] for v in response.json().get("uploaded_voices", [])}


def backend_up(url: str) -> float:
    return gateway_metric(url, "higgs_gateway_state_backend_up", backend="redis")


def test_a_routing_patch_on_one_replica_changes_the_others_next_decision(fleet: Fleet) -> None:
    before = speak(fleet.second.url)
    assert before.status_code == 200 and before.headers["x-gateway-pool"] == "low_latency", before.headers
    # The stored overrides are opaque to the state store: a per-worker cap and the learning
    # settings travel like any other key, and apply like an operator's own patch.
    # The latency reserve is pinned (no `latency` traffic came, so it would be empty).
    patch = {
        "thresholds": {"max_per_worker": {"low_latency": 1}, "adaptive_latency_reserve": False},
        "learning": {"half_life_s": 120.0},
    }
    try:
        response = patch_routing(fleet.first.url, patch)
        assert response.status_code == 200, response.text
        assert response.json()["stored_in"] == "redis", response.json()
        with httpx.Client(headers=ADMIN, timeout=10) as poll:  # one connection: polls cost ~1 ms
            started = time.monotonic()  # the admin call has answered
            wait_until(
                lambda: poll.get(f"{fleet.second.url}/admin/routing").json()["thresholds"]["max_per_worker"]
                == {"low_latency": 1},
                10, "the second replica applies the first one's patch", interval=0.001,
            )  # fmt: skip
        print(f"patch answered by one replica, applied by the other within {1000 * (time.monotonic() - started):.1f} ms")
        assert routing(fleet.second.url)["learning"]["half_life_s"] == 120.0
        after = speak(fleet.second.url)
        assert after.status_code == 200
        # One place per low-latency worker, kept for `latency` (the pinned reserve): balanced goes elsewhere.
        assert (after.headers["x-gateway-pool"], after.headers["x-gateway-route-reason"]) == (
            "high_throughput", "fastest_finish",
        )  # fmt: skip
    finally:
        back = {
            "thresholds": {"max_per_worker": {"low_latency": LL_DEFAULT_SLOTS}, "adaptive_latency_reserve": True},
            "learning": {"half_life_s": 600.0},
        }
        assert patch_routing(fleet.second.url, back).status_code == 200
    wait_until(
        lambda: routing(fleet.first.url)["thresholds"]["max_per_worker"] == {"low_latency": LL_DEFAULT_SLOTS},
        10, "the way back reaches the first",
    )  # fmt: skip
    assert speak(fleet.first.url).headers["x-gateway-pool"] == "low_latency"


def test_a_drain_on_one_replica_is_honoured_by_both(fleet: Fleet) -> None:
    ll_id = worker_id(fleet.first.url, fleet.ll.url)
    drained = httpx.post(f"{fleet.first.url}/admin/workers/{ll_id}/drain", headers=ADMIN, timeout=10)
    assert drained.status_code == 200 and drained.json()["drained"], drained.text
    try:
        for replica in fleet.replicas:
            wait_until(
                lambda r=replica: _worker(r.url, ll_id)["drained"], 10, f"{replica.url} sees the drain"
            )
            response = speak(replica.url, sla="latency")
            assert response.status_code == 200
            assert response.headers["x-gateway-pool"] == "high_throughput", response.headers
    finally:
        undrained = httpx.post(f"{fleet.second.url}/admin/workers/{ll_id}/undrain", headers=ADMIN, timeout=10)
        assert undrained.status_code == 200, undrained.text
    wait_until(lambda: not _worker(fleet.first.url, ll_id)["drained"], 10, "the undrain through the second reaches the first")
    assert speak(fleet.first.url, sla="latency").headers["x-gateway-pool"] == "low_latency"


def _worker(url: str, wid: str) -> dict[str, Any]:
    pools = httpx.get(f"{url}/admin/pools", headers=ADMIN, timeout=10).json()["pools"]
    return next(w for pool in pools.values() for w in pool["workers"] if w["id"] == wid)


def test_a_voice_uploaded_through_one_replica_is_spoken_through_the_other(fleet: Fleet) -> None:
    response = upload(fleet.first.url, "Shared-Narrator")
    assert response.status_code == 200, response.text
    wait_until(lambda: "Shared-Narrator" in voice_names(fleet.second.url), 10, "the second replica lists the voice")
    spoken = speak(fleet.second.url, voice="shared-narrator")
    assert spoken.status_code == 200, spoken.text
    assert len(spoken.content) > 0
    duplicate = upload(fleet.second.url, "shared-narrator")
    assert duplicate.status_code == 409, duplicate.text
    deleted = httpx.delete(f"{fleet.second.url}/v1/audio/voices/Shared-Narrator", headers=AUTH, timeout=30)
    assert deleted.status_code == 200, deleted.text
    wait_until(lambda: "Shared-Narrator" not in voice_names(fleet.first.url), 10, "the delete reaches the first")


async def test_one_key_through_both_replicas_is_held_to_its_single_limit(fleet: Fleet) -> None:
    # Requests naming an unknown model: each spends a token, then answers 404 without
    # touching a worker, so the limiter alone decides between 404 and 429.
    body = {"model": "no-such-model", "voice": "alloy", "input": "hi"}
    headers = {"Authorization": f"Bearer {RATE_KEY}"}
    statuses: Counter[tuple[int, int]] = Counter()

    async def client(index: int, http: httpx.AsyncClient) -> None:
        for _ in range(20):
            url = fleet.replicas[index % 2].url
            response = await http.post(f"{url}/v1/audio/speech", json=body, headers=headers)
            statuses[(index % 2, response.status_code)] += 1

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=16)) as http:
        started = time.monotonic()
        await asyncio.gather(*(client(i, http) for i in range(8)))
        elapsed = time.monotonic() - started
    allowed = statuses[(0, 404)] + statuses[(1, 404)]
    limited = statuses[(0, 429)] + statuses[(1, 429)]
    assert allowed + limited == 160, statuses
    print(f"160 requests in {elapsed:.2f} s through two replicas: {allowed} allowed, {limited} limited")
    # One bucket: its burst plus what it refilled while the test ran (a token of slack for
    # the refill between the last two reads of the clock), whichever replica asked.
    assert allowed <= RATE_BURST + RATE_RPS * elapsed + 1, (allowed, elapsed)
    assert statuses[(0, 404)] > 0 and statuses[(1, 404)] > 0, statuses


def test_a_keys_concurrent_streams_are_one_limit_across_replicas(fleet: Fleet) -> None:
    headers = {"Authorization": f"Bearer {STREAM_KEY}"}
    # ~60 s of audio: at time scale 0.1 it streams for a wall second or two.
    long_speech = speech_body(" ".join([LONG_TEXT] * 2), response_format="pcm")
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{fleet.first.url}/v1/audio/speech", json=long_speech, headers=headers) as first:
            assert first.status_code == 200
            chunks = first.iter_bytes()
            received = [next(chunks)]  # the key's one stream runs through the first replica
            refused = client.post(f"{fleet.second.url}/v1/audio/speech", json=speech_body(), headers=headers)
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "concurrent_streams_exceeded"
            received.extend(chunks)
        assert sum(map(len, received)) > 48_000 * 10
        # The stream ended on the first replica: once it lets go (its key gauge drops after the
        # lease is released in Redis; the client may see the last byte a moment earlier), the other admits.
        wait_until(lambda: gateway_metric(fleet.first.url, "higgs_gateway_key_streams", tier="one-stream") == 0,
                   10, "the first replica released the key's stream")  # fmt: skip
        again = client.post(f"{fleet.second.url}/v1/audio/speech", json=speech_body(response_format="pcm"), headers=headers)
        assert again.status_code == 200, again.text
    limited = gateway_metric(
        fleet.second.url, "higgs_gateway_key_requests_total", tier="one-stream", result="stream_limited"
    )
    assert limited == 1


def test_redis_down_stops_no_speech_refuses_admin_writes_and_recovers(fleet: Fleet) -> None:
    assert upload(fleet.first.url, "survivor").status_code == 200
    assert patch_routing(fleet.first.url, {"thresholds": {"reserve_for_latency": 1}}).status_code == 200
    for replica in fleet.replicas:
        wait_until(lambda r=replica: "survivor" in voice_names(r.url), 10, "both replicas have the voice")
        wait_until(lambda r=replica: routing(r.url)["thresholds"]["reserve_for_latency"] == 1, 10, "both have the patch")

    async def load(count: int) -> list[int]:
        async with httpx.AsyncClient(timeout=60) as http:
            semaphore = asyncio.Semaphore(4)

            async def one(index: int) -> int:
                async with semaphore:
                    url = fleet.replicas[index % 2].url
                    voice = "survivor" if index % 3 == 0 else "alloy"
                    body = speech_body(SHORT_TEXT, response_format="pcm", voice=voice)
                    response = await http.post(f"{url}/v1/audio/speech", json=body, headers=AUTH)
                    return response.status_code

            return list(await asyncio.gather(*(one(i) for i in range(count))))

    async def load_across_an_outage() -> list[int]:
        running = asyncio.create_task(load(16))
        await asyncio.sleep(0.5)  # some requests are in flight, some still to come
        await asyncio.to_thread(fleet.redis.kill)
        return await running

    statuses = asyncio.run(load_across_an_outage())
    assert statuses == [200] * 16, Counter(statuses)

    for replica in fleet.replicas:
        wait_until(lambda r=replica: backend_up(r.url) == 0, 10, "the gateway reports the store down")
        assert httpx.get(f"{replica.url}/ready", timeout=10).status_code == 200
        refused = patch_routing(replica.url, {"thresholds": {"reserve_for_latency": 2}})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "state_unavailable"
        assert refused.headers.get("retry-after")
        ll_id = worker_id(replica.url, fleet.ll.url)
        assert httpx.post(f"{replica.url}/admin/workers/{ll_id}/drain", headers=ADMIN, timeout=10).status_code == 503
        assert upload(replica.url, "not-now").status_code == 503
        assert routing(replica.url)["thresholds"]["reserve_for_latency"] == 1  # last known state kept
        assert speak(replica.url, voice="survivor").status_code == 200  # the local copy serves
    assert gateway_metric(fleet.first.url, "higgs_gateway_state_rate_limit_unavailable_total", mode="open") > 0

    # Back, but empty (no persistence here): the replicas fill it again from their copies.
    fleet.redis.start()
    for replica in fleet.replicas:
        wait_until(lambda r=replica: backend_up(r.url) == 1, 20, "the gateway reconnects")
    wait_until(
        lambda: patch_routing(fleet.second.url, {"thresholds": {"reserve_for_latency": 2}}).status_code == 200,
        10, "admin writes work again",
    )  # fmt: skip
    wait_until(lambda: routing(fleet.first.url)["thresholds"]["reserve_for_latency"] == 2, 10, "and reach the other replica")
    for replica in fleet.replicas:
        assert "survivor" in voice_names(replica.url), "a Redis restart must not drop the replicas' voices"
    assert speak(fleet.second.url, voice="survivor").status_code == 200
