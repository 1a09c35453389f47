"""The planner through the app stack: arrivals counted at admission, GET /admin/planner, gauges."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.app import create_app
from gateway.config import load_config
from gateway.types import PoolName
from tests.support.deadline import until
from tests.unit.test_app import LL_URL, PCM, worker_control
from tests.unit.upstream.fakes import FakeResponse, FakeTransport

ADMIN = {"Authorization": "Bearer planner-admin-token"}
REQUESTS = 4


def gauge_lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"higgs_gateway_{name}")]


async def test_admin_planner_and_gauges_follow_what_admission_saw(tmp_path: Path) -> None:
    config = load_config(
        overrides={
            "data_dir": str(tmp_path),
            "auth": {"admin_token": "planner-admin-token"},
            "logging": {"access_log": False},
            "health": {"interval_s": 0.05},
            "pools": {"low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": [LL_URL]}},
            # Passes are driven by the test (app.planner.plan()), not by the clock.
            # latency at RTF 0.34: faster than a high-throughput worker runs even idle.
            "planner": {
                "interval_s": 3600, "min_requests": REQUESTS, "pools": {"high_throughput": {"max": 3}},
                "objectives": {"latency": {"ttfp_s": 0.5, "rtf": 0.34}},
            },
        }
    )
    transport = FakeTransport({LL_URL: [FakeResponse(200, [PCM]) for _ in range(REQUESTS)]})
    app = create_app(
        config, transport=transport, control_client=httpx.AsyncClient(transport=httpx.MockTransport(worker_control))
    )
    await app.start()
    try:
        await until(lambda: app.fleet.view.routable_count(PoolName.LOW_LATENCY), 10, "the low-latency worker routable")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test") as client:
            anonymous = await client.get("/admin/planner")
            app.planner.plan()
            thin = (await client.get("/admin/planner", headers=ADMIN)).json()
            thin_metrics = (await client.get("/metrics")).text
            body = {"model": "tts-1", "input": "Hello there, this is a test.", "voice": "alloy", "response_format": "pcm"}
            for sla in ("latency", "balanced", "throughput", "latency")[:REQUESTS]:
                spoken = await client.post("/v1/audio/speech", json=body, headers={"x-sla-class": sla})
                assert spoken.status_code == 200
            app.planner.plan()
            judged = (await client.get("/admin/planner", headers=ADMIN)).json()
            metrics = (await client.get("/metrics")).text
    finally:
        await app.stop()

    assert anonymous.status_code == 401
    assert thin["judged"] is False and "too little traffic" in thin["status"]
    assert thin["desired_workers"] is None and "plan" not in thin
    assert gauge_lines(thin_metrics, "desired_workers{") == []  # nothing to act on yet
    assert "higgs_gateway_planner_judged 0.0" in thin_metrics

    assert judged["judged"] is True and judged["enabled"] is True
    arrivals = judged["inputs"]["arrivals"]["classes"]
    assert arrivals["latency"]["requests"] == 2 and arrivals["throughput"]["requests"] == 1
    assert arrivals["latency"]["mean_audio_s"] > 1
    assert judged["inputs"]["pool_bounds"]["high_throughput"] == {"min": 0, "max": 3}
    assert set(judged["inputs"]["curves"]) == {"low_latency", "high_throughput"}
    desired = judged["desired_workers"]
    assert desired == judged["plan"]["workers"] and desired["low_latency"] >= 1  # latency traffic needs one
    assert judged["plan"]["feasible"] is True and judged["plan"]["margin"] > 0
    [chosen] = [c for c in judged["candidates"] if c["chosen"]]
    assert chosen["workers"] == desired and chosen["placement"]["latency"] == {"low_latency": 1.0}
    assert dict(app.planner.desired_workers() or {}) == desired

    for pool, count in desired.items():
        assert f'higgs_gateway_desired_workers{{pool="{pool}"}} {float(count)}' in metrics
    bound = judged["plan"]["bound_by"]
    assert f'higgs_gateway_planner_bound_by{{objective="{bound["low_latency"]}",pool="low_latency"}} 1.0' in metrics
    assert len([line for line in gauge_lines(metrics, "planner_bound_by{") if line.endswith(" 1.0")]) == 2
    assert "higgs_gateway_planner_judged 1.0" in metrics
    assert gauge_lines(metrics, "planner_margin ")
    assert gauge_lines(metrics, 'planner_arrival_rate{sla_class="latency"}')
