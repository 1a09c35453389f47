"""The desired mix a benchmark holds through a file: read each time, never half-written."""

from __future__ import annotations

from pathlib import Path

from gateway.bench.profile_changes import FileMix, write_mix


def test_the_gateway_reads_the_mix_last_written_and_no_judgement_without_one(tmp_path: Path) -> None:
    path = tmp_path / "mix.json"
    mix = FileMix(path)
    assert mix.mix_for({"low_latency": 1, "high_throughput": 1}) is None  # nothing held yet
    write_mix(path, {"low_latency": 0, "high_throughput": 2})
    assert mix.mix_for({"low_latency": 1, "high_throughput": 1}) == {"low_latency": 0, "high_throughput": 2}
    write_mix(path, {"low_latency": 1, "high_throughput": 1})
    assert mix.mix_for({"low_latency": 1, "high_throughput": 1}) == {"low_latency": 1, "high_throughput": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["mix.json"]


def test_a_file_that_is_not_a_mix_is_no_judgement(tmp_path: Path) -> None:
    path = tmp_path / "mix.json"
    for text in ("{", "[1, 2]", '{"low_latency": "one"}'):
        path.write_text(text)
        assert FileMix(path).mix_for({"low_latency": 1, "high_throughput": 1}) is None
