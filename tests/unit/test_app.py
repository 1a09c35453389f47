"""The stack ``serve`` runs (``create_app``), over a fake worker transport: no sockets."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.app import create_app
from gateway.config import load_config
from gateway.pools.sources import url_worker_id
from gateway.types import PoolName
from gateway.types.observations import StreamObservation, StreamOutcome
from tests.support.deadline import until
from tests.unit.upstream.fakes import FakeResponse, FakeTransport

LL_URL, HT_URL = "http://ll.test:1", "http://ht.test:1"
ORIGIN = "https://app.example"
PCM = b"\x01\x00" * 2400


def worker_control(request: httpx.Request) -> httpx.Response:
    """Health, load and voice calls of the control plane."""
    if request.url.path == "/health":
        return httpx.Response(200, json={"status": "ok"})
    if request.url.path == "/load":
        return httpx.Response(200, json={"server_load": 0})
    return httpx.Response(200, json={"voices": []})


class Observations:
    def __init__(self) -> None:
        self.seen: list[StreamObservation] = []

    def on_stream_done(self, observation: StreamObservation) -> None:
        self.seen.append(observation)


async def test_speech_gets_cors_headers_through_the_stack_serve_runs(tmp_path: Path) -> None:
    config = load_config(
        overrides={
            "data_dir": str(tmp_path),
            "server": {"cors_origins": [ORIGIN]},
            "logging": {"access_log": False},
            "health": {"interval_s": 0.05},
            "pools": {
                "low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": [LL_URL]},
                "high_throughput": {"profile": "higgs_multimodal_qwen3_high_throughput.yaml", "workers": [HT_URL]},
            },
        }
    )
    transport = FakeTransport({LL_URL: [FakeResponse(200, [PCM, PCM])], HT_URL: []})
    observations = Observations()
    app = create_app(
        config,
        transport=transport,
        control_client=httpx.AsyncClient(transport=httpx.MockTransport(worker_control)),
        stream_observer=observations,
    )
    await app.start()
    try:
        # The health checker's first probes make both workers routable.
        await until(lambda: all(app.fleet.view.routable_count(pool) for pool in PoolName), 10, "both workers routable")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test") as client:
            body = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}
            response = await client.post(
                "/v1/audio/speech", json=body, headers={"Origin": ORIGIN, "x-sla-class": "latency"}
            )
            preflight = await client.options(
                "/v1/audio/speech", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
            )
            models = await client.get("/v1/models", headers={"Origin": ORIGIN})
    finally:
        await app.stop()
    assert response.status_code == 200, response.text
    assert response.content == PCM + PCM
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert "x-gateway-pool" in response.headers["access-control-expose-headers"]
    assert response.headers["x-request-id"]
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == ORIGIN
    assert models.headers["access-control-allow-origin"] == ORIGIN
    [seen] = observations.seen
    assert response.headers["x-gateway-pool"] == PoolName.LOW_LATENCY
    assert (seen.worker_id, seen.pool, seen.outcome, seen.bytes) == (
        url_worker_id(PoolName.LOW_LATENCY, LL_URL), PoolName.LOW_LATENCY, StreamOutcome.COMPLETED, 2 * len(PCM)
    )
    assert all(w.inflight == 0 for w in app.fleet.view.workers)


async def test_admin_fleet_is_the_playground_panel_as_json(tmp_path: Path) -> None:
    """Workers, queues, which pools can serve and the routing decisions so far, behind the admin token."""
    config = load_config(
        overrides={
            "data_dir": str(tmp_path),
            "auth": {"admin_token": "fleet-admin-token-0"},
            "logging": {"access_log": False},
            "health": {"interval_s": 0.05},
            "pools": {"low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": [LL_URL]}},
        }
    )
    transport = FakeTransport({LL_URL: [FakeResponse(200, [PCM])]})
    app = create_app(
        config, transport=transport, control_client=httpx.AsyncClient(transport=httpx.MockTransport(worker_control))
    )
    await app.start()
    try:
        await until(lambda: app.fleet.view.routable_count(PoolName.LOW_LATENCY), 10, "the low-latency worker routable")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test") as client:
            anonymous = await client.get("/admin/fleet")
            body = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}
            spoken = await client.post("/v1/audio/speech", json=body, headers={"x-sla-class": "throughput"})
            fleet = await client.get("/admin/fleet", headers={"Authorization": "Bearer fleet-admin-token-0"})
    finally:
        await app.stop()
    assert anonymous.status_code == 401 and anonymous.json()["error"]["message"]
    assert spoken.status_code == 200 and spoken.headers["x-gateway-route-reason"] == "no_ht_workers"
    assert fleet.status_code == 200 and fleet.headers["content-type"] == "application/json"
    document = fleet.json()
    assert document["decisions"] == [{"pool": "low_latency", "reason": "no_ht_workers", "count": 1.0}]
    assert document["availability"] == {
        "status": "degraded",
        "routable_workers": {"low_latency": 1, "high_throughput": 0},
        "empty_pools": ["high_throughput"],
    }
    [worker] = document["pools"]["low_latency"]["workers"]
    assert worker["state"] == "ready" and worker["url"] == LL_URL
    assert document["pools"]["high_throughput"]["workers"] == []
    assert set(document["queue_depths"]) == {"latency", "balanced", "throughput"}
    assert document["profile_changes"] == {"enabled": False}  # static workers keep their profile
