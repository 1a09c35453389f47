"""The load generator and the tuner against a real emulated worker on 127.0.0.1."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gateway.bench import cli as bench_cli
from gateway.bench import tune
from tests.support.procs import running_emulator

TIME_SCALE = 0.02  # 50x real time: a 10 s clip streams in 0.2 s
HT_PROFILE = "higgs_multimodal_qwen3_high_throughput.yaml"


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory):
    with running_emulator(tmp_path_factory.mktemp("bench-worker"), time_scale=TIME_SCALE) as proc:
        yield proc


def _accounted(phase: dict) -> None:
    assert phase["ok"] + sum(phase["errors"].values()) == phase["sent"]


def test_sweep_writes_json_csv_markdown_and_plots(worker, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code = bench_cli.main([
        "sweep", worker.url, "--levels", "1,2", "--requests", "4", "--time-scale", str(TIME_SCALE),
        "--label", "direct", "--out", str(out), "--plot", "--no-progress",
    ])  # fmt: skip
    assert code == 0
    document = json.loads((out / "direct-sweep.json").read_text())
    assert document["schema"] == "higgs-gateway-bench/1" and document["time_scale"] == TIME_SCALE
    assert [p["concurrency"] for p in document["phases"]] == [1, 2]
    for phase in document["phases"]:
        assert phase["sent"] == 4
        _accounted(phase)
        assert phase["ok"] == 4, phase["errors"]
        assert phase["pools"] == {"none": 4}  # a worker sends no x-gateway-pool header
        assert phase["audio_s"] > 0 and phase["audio_s_per_s"] > 0
        for metric in ("ttfp_s", "rtf", "e2e_s", "underrun_s"):
            assert set(phase[metric]) == {"count", "mean", "median", "p99", "max"}
        # Modelled units: a real worker's TTFP is tens to hundreds of ms, RTF below 1.
        assert 0.01 < phase["ttfp_s"]["median"] < 5 and 0 < phase["rtf"]["mean"] < 5
    rows = list(csv.DictReader((out / "direct-sweep.csv").open()))
    assert [row["phase"] for row in rows] == ["c1", "c2"]
    assert "| direct | c1 | all | 4 | 4 |" in (out / "direct-sweep.md").read_text()
    assert {p.name for p in out.glob("*.png")} == {f"direct-sweep-{n}.png" for n in ("ttfp", "rtf", "throughput")}
    assert "| direct | c2 |" in capsys.readouterr().out


def test_bursty_trace_accounts_for_every_request_per_class(worker, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = bench_cli.main([
        "trace", worker.url, "--kind", "bursty", "--duration", "20", "--latency-rate", "0.5",
        "--burst-rate", "2", "--on", "5", "--off", "5", "--time-scale", str(TIME_SCALE),
        "--label", "mixed", "--out", str(out), "--no-progress",
    ])  # fmt: skip
    assert code == 0
    (phase,) = json.loads((out / "mixed-trace.json").read_text())["phases"]
    _accounted(phase)
    assert set(phase["by_class"]) == {"latency", "throughput"}
    assert sum(group["sent"] for group in phase["by_class"].values()) == phase["sent"]
    for group in phase["by_class"].values():
        _accounted(group)


def test_errors_are_counted_by_status(worker, tmp_path: Path) -> None:
    # A model name the worker does not serve: every request is a 404, none is lost.
    code = bench_cli.main([
        "sweep", worker.url, "--levels", "2", "--requests", "3", "--model", "no-such-model",
        "--label", "bad", "--out", str(tmp_path), "--no-progress",
    ])  # fmt: skip
    assert code == 0
    (phase,) = json.loads((tmp_path / "bad-sweep.json").read_text())["phases"]
    assert phase["sent"] == 3 and phase["ok"] == 0 and phase["errors"] == {"http_404": 3}


def test_tune_direct_to_one_worker_of_each_pool(worker, tmp_path: Path) -> None:
    with running_emulator(tmp_path, profile=HT_PROFILE, time_scale=TIME_SCALE, name="ht") as ht:
        out = tmp_path / "tune"
        code = tune.main([
            "--ll-url", worker.url, "--ht-url", ht.url, "--levels", "1,2", "--requests", "3",
            "--time-scale", str(TIME_SCALE), "--out", str(out), "--no-progress",
        ])  # fmt: skip
    assert code == 0
    result = json.loads((out / "tune.json").read_text())
    rec = result["recommendation"]
    assert rec["slots_per_worker"] >= 1 and rec["balanced_threshold"] == rec["slots_per_worker"]
    for pool in ("low_latency", "high_throughput"):
        phases = result["measurements"][pool]["phases"]
        assert [p["concurrency"] for p in phases] == [1, 2]
        for phase in phases:
            assert phase["sent"] == 3
            _accounted(phase)
    assert "slots_per_worker:" in (out / "tune.md").read_text()
