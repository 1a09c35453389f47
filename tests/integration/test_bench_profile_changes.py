"""``bench profile-changes`` end to end, very small: real gateways, supervised emulators that
model their start-up, both changes made, the report written.

Only the report's shape and what every run must show are checked (performance is the
benchmark's business, not a test's): one run id, both references measured, the fleet
reaching two high-throughput workers and coming back to a low-latency one, each change
completed, every target judged, and not one failed request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.bench import cli as bench_cli

pytestmark = pytest.mark.timeout(300)

TIME_SCALE = 0.05  # modelled start-up: low-latency 151 s -> 7.5 s, high-throughput 90 s -> 4.5 s


def test_a_tiny_run_changes_both_ways_and_reports_every_target(tmp_path: Path) -> None:
    out = tmp_path / "profile-changes"
    code = bench_cli.main([
        "profile-changes", "--time-scale", str(TIME_SCALE), "--concurrency", "8", "--low-concurrency", "2",
        "--levels", "1,2", "--requests", "4", "--settle", "0", "--window", "20", "--hold", "10",
        "--change-timeout", "3000", "--mix", "load",  # the mix c8 is held to: the change itself, deterministic
        "--quiet-load", "1000", "--quiet-wait", "0", "--no-progress", "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    document = json.loads((out / "profile-changes.json").read_text())
    assert document["schema"] == "higgs-gateway-bench-profile-changes/1"
    assert document["params"]["mix"] == "load" and document["time_scale"] == TIME_SCALE
    references, changing = document["references"], document["changing"]
    runs = {references["adaptive"]["sweep"]["notes"]["run_id"], changing["sweep"]["notes"]["run_id"]}
    assert runs == {document["notes"]["run_id"]}
    assert references["ht+ht"]["window"]["audio_s_per_s"] > 0
    assert [p["concurrency"] for p in references["adaptive"]["sweep"]["phases"]] == [1, 2]

    assert changing["to_ht"]["reached_s"] is not None
    assert changing["to_ht"]["routable"] == {"low_latency": 0, "high_throughput": 2}
    assert changing["window"]["after_change"] and changing["window"]["audio_s_per_s"] > 0
    assert changing["back"]["reached_s"] > changing["to_ht"]["reached_s"]
    assert changing["back"]["routable"]["low_latency"] == 1
    moves = [(c["from_pool"], c["to_pool"], c["result"]) for c in changing["changes"]]
    assert moves == [("low_latency", "high_throughput", "completed"), ("high_throughput", "low_latency", "completed")]
    assert all(c["finished_s"] > c["started_s"] for c in changing["changes"])
    assert [p["concurrency"] for p in changing["sweep"]["phases"]] == [1, 2]
    assert changing["timeline"] and changing["samples"]

    # Not one failed request, during the changes or anywhere else.
    assert changing["requests"]["during_changes"]["sent"] > 0
    assert changing["requests"]["during_changes"]["failed"] == 0
    assert changing["requests"]["failed"] == references["ht+ht"]["requests"]["failed"] == 0
    assert references["adaptive"]["requests"]["failed"] == 0

    names = [t["name"] for t in document["targets"]]
    assert names[0] == "sustained c8: high-throughput workers"
    assert len(names) == 7 and all(t["passed"] in (True, False) for t in document["targets"])
    failures = {t["name"]: t["passed"] for t in document["targets"] if t["name"].startswith("failed")}
    assert failures == {"failed requests during the changes": True, "failed requests, whole run (every fleet)": True}
    readme = (out / "README.md").read_text()
    assert "## Targets" in readme and "![timeline](timeline.png)" in readme
    assert (out / "timeline.png").stat().st_size > 0
