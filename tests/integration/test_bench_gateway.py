"""The load generator and the tuner through a real gateway over emulated pools."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from gateway.bench import cli as bench_cli
from gateway.bench import tune
from tests.support.stack import ADMIN_TOKEN, running_stack

TIME_SCALE = 0.02


def test_trace_through_the_gateway_records_the_pool_of_every_request(tmp_path: Path) -> None:
    with running_stack(tmp_path, time_scale=TIME_SCALE) as stack:
        out = tmp_path / "out"
        code = bench_cli.main([
            "trace", stack.url, "--kind", "bursty", "--duration", "20", "--latency-rate", "0.5",
            "--burst-rate", "2", "--on", "5", "--off", "5", "--time-scale", str(TIME_SCALE),
            "--label", "gw", "--out", str(out), "--no-progress",
        ])  # fmt: skip
        assert code == 0
        (phase,) = json.loads((out / "gw-trace.json").read_text())["phases"]
        assert phase["ok"] + sum(phase["errors"].values()) == phase["sent"]
        assert sum(phase["pools"].values()) == phase["ok"]
        assert set(phase["pools"]) <= {"low_latency", "high_throughput"}
        # Light load: latency requests find low-latency slots, throughput ones stay on HT.
        assert phase["by_class"]["latency"]["pools"].get("low_latency", 0) > 0
        assert phase["by_class"]["throughput"]["pools"].get("high_throughput", 0) > 0


def test_tune_through_the_gateway_applies_the_balanced_threshold(tmp_path: Path) -> None:
    with running_stack(tmp_path, time_scale=TIME_SCALE) as stack:
        out = tmp_path / "tune"
        code = tune.main([
            "--url", stack.url, "--levels", "1,2", "--requests", "3", "--no-warm-up",
            "--time-scale", str(TIME_SCALE), "--out", str(out), "--no-progress",
            "--apply", "--admin-token", ADMIN_TOKEN,
        ])  # fmt: skip
        assert code == 0
        rec = json.loads((out / "tune.json").read_text())["recommendation"]
        assert rec["low_latency_workers"] == 1  # read from the gateway's /ready
        routing = httpx.get(f"{stack.url}/admin/routing", headers=stack.admin_headers, timeout=5).json()
        assert json.dumps(routing).count(f'"balanced_threshold": {rec["balanced_threshold"]}') >= 1
