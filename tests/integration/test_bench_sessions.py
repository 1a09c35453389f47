"""``bench sessions`` end to end: real gateways and emulated workers, a tiny sweep, the report.

Only the report's shape and what every run must show are checked (performance is the
benchmark's business, not a test's): one run id across setups, each level's sessions and
utterances, first audio measured, each sentence's pool named by the gateway, a barge-in
that ended with every worker slot free, one session abandoned each way with nothing left
held, and a targets table that judges every row.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gateway.bench import cli as bench_cli
from gateway.bench.session_abandon import WAYS

TIME_SCALE = 0.05


def test_a_tiny_sessions_run_reports_every_setup_of_one_run(tmp_path: Path) -> None:
    out = tmp_path / "sessions"
    code = bench_cli.main([
        "sessions", "--levels", "1,2", "--utterances", "1", "--sentences", "2", "--time-scale", str(TIME_SCALE),
        "--http-probes", "1", "--barge-in-after", "0.5", "--quiet-load", "1000", "--quiet-wait", "0",
        "--abandon", str(len(WAYS)), "--abandon-concurrency", str(len(WAYS)),
        "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    documents = {name: json.loads((out / f"{name}-sessions.json").read_text())
                 for name in ("adaptive", "ll+ll", "ht+ht", "direct")}  # fmt: skip
    assert len({d["notes"]["run_id"] for d in documents.values()}) == 1
    for name, document in documents.items():
        assert document["schema"] == "higgs-gateway-bench-sessions/1" and document["mode"] == "sessions"
        assert document["params"]["tokens_per_second"] == 30.0
        assert [p["sessions"] for p in document["phases"]] == [1, 2]
        for phase in document["phases"]:
            assert phase["utterances"] == phase["sessions"] == phase["utterances_with_audio"], name
            assert phase["errors"] == 0, name
            assert phase["first_audio_s"]["count"] == phase["sessions"]
            assert phase["first_audio_s"]["median"] > 0
            assert phase["sentence_silence_s"]["count"] == 2 * phase["sessions"]  # two sentences each
            assert phase["audio_s"] > 0
            assert phase["largest_gap_s"] == pytest.approx(phase["gaps_s"][0] if phase["gaps_s"] else 0.0, abs=1e-5)
            if name != "direct":  # the gateway names each sentence's pool in audio.start
                assert sum(phase["pools"].values()) == 2 * phase["sessions"]
        assert document["http_first_sentence_ttfp_s"] > 0
    assert set(documents["ll+ll"]["phases"][0]["pools"]) == {"low_latency"}
    assert set(documents["ht+ht"]["phases"][0]["pools"]) == {"high_throughput"}
    for name in ("adaptive", "ll+ll", "ht+ht"):
        barge = documents[name]["barge_in"]
        assert barge["slot_freed_s"] is not None, name  # every worker back to /load 0
        assert barge["total_bytes_reported"] > 0 and barge["last_byte_s"] >= 0
    assert documents["direct"]["barge_in"] is None  # the worker has no input.cancel
    for name in ("adaptive", "ll+ll", "ht+ht"):  # one session abandoned each way, then nothing left
        abandon = documents[name]["abandon"]
        assert abandon["ways"] == dict.fromkeys(WAYS, 1) and abandon["failed"] == {}, (name, abandon)
        assert abandon["settle_s"] is not None and abandon["held_after"] == 0, (name, abandon)
        assert abandon["abandoned_streaming"] >= 1
        for reading in (abandon["before"], abandon["after"]):
            assert reading["tasks"] > 0 and reading["rss_bytes"] > 0 and reading["open_fds"] > 0
        assert abandon["after"]["worker_load"] == abandon["after"]["sessions_open"] == 0
    assert "abandon" not in documents["direct"]

    readme = (out / "README.md").read_text()
    assert "## Targets" in readme and "every setup measured in the same run" in readme
    rows = re.findall(r"^\| (\d sessions?[: ][^|]+|capacity[^|]+|barge-in[^|]+) \|.*\| (yes|\*\*no\*\*) \|$", readme, re.M)
    # per level (1 and 2) 2 rows, 2 against direct, 2 capacity, 2 barge-in, 2 abandonment
    assert len(rows) == 12
    assert "8 sessions abandoned every way: sessions, slots, streams, tasks left" in readme
    assert "not measured by `bench sessions`" not in readme and "## Abandoned sessions" in readme
    assert (out / "sessions_first_audio.png").stat().st_size > 0 and (out / "sessions_silence.png").stat().st_size > 0

    # The report re-renders from the JSON files alone.
    (out / "README.md").unlink()
    assert bench_cli.main(["sessions", "--report-only", "--out", str(out)]) == 0
    assert "## Targets" in (out / "README.md").read_text()
