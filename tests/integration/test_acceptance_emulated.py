"""``higgs-gateway acceptance --emulate`` end to end, shortened: the three variants started one
after another through the supervisor, swept at c1 and c2, heard, and the report, curves and
thresholds written. The full sweep is the committed run in docs/benchmarks/acceptance/."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.support.procs import GATEWAY_CLI

VARIANTS = ("low_latency", "low_latency_xqa", "high_throughput")


def test_the_emulated_run_writes_the_report_curves_and_thresholds(tmp_path: Path) -> None:
    out = tmp_path / "acceptance"
    argv = [*GATEWAY_CLI, "acceptance", "--emulate", "--levels", "1,2", "--requests", "4", "--out", str(out), "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    # 1: some check failed. Timing checks depend on the machine's load; c16 is not measured here.
    assert done.returncode in (0, 1), done.stderr[-3000:]

    runs = json.loads((out / "runs.json").read_text())
    assert set(runs) == set(VARIANTS)
    for variant in VARIANTS:
        phases = runs[variant]["sweep"]["phases"]
        assert [p["name"] for p in phases] == ["c1", "c2"]
        assert all(p["sent"] == p["ok"] == 4 and not p["errors"] for p in phases), phases
        assert [q["concurrency"] for q in runs[variant]["quality"]] == [1, 2]
        assert all(q["clean"] and q["failed_requests"] == 0 for q in runs[variant]["quality"]), runs[variant]["quality"]

    checks = {c["name"]: c for c in json.loads((out / "checks.json").read_text())}
    for variant in VARIANTS:
        quality = checks[f"{variant} audio quality"]
        assert quality["passed"] and quality["detail"] == "clean at every level (c1, c2)", quality
    assert "XQA/FlashInfer RTF ratio at c1" in checks
    assert checks["low_latency RTF at c16"] == {"name": "low_latency RTF at c16", "passed": False, "detail": "not measured"}
    tune = json.loads((out / "tune.json").read_text())
    assert set(tune["recommendation"]["measured"]) == {"low_latency", "high_throughput"}
    assert set(tune["recommendation"]["measured"]["low_latency"]["rtf"]) == {"1", "2"}
    assert "routing" in yaml.safe_load((out / "thresholds.yaml").read_text())

    report = (out / "report.md").read_text()
    assert "higgs-gateway acceptance --emulate --levels 1,2" in report
    assert f"{sum(c['passed'] for c in checks.values())} of {len(checks)} checks passed" in report
