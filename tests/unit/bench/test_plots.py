"""Combining result files into plots and tables, through the CLI (no sockets)."""

from __future__ import annotations

import csv
import json

import pytest

from gateway.bench import cli, report
from gateway.bench.client import RequestResult
from gateway.bench.summary import PhaseResult, summarize_phase


def _document(label: str, mode: str, factor: float) -> dict:
    phases = []
    for concurrency in (1, 2, 4):
        results = [RequestResult("latency" if mode == "trace" else None, 80, 0.0, 200, None, "low_latency",
                                 0.1 * factor * concurrency, 1.0, 96_000, 0.0) for _ in range(3)]  # fmt: skip
        phase = PhaseResult(f"c{concurrency}", "closed", concurrency if mode == "sweep" else None, 2.0, 0.0, results)
        phases.append(summarize_phase(phase, time_scale=0.5))
    return {"schema": report.SCHEMA, "label": label, "mode": mode, "url": "http://x", "time_scale": 0.5,
            "phases": phases if mode == "sweep" else phases[:1]}  # fmt: skip


def test_plot_combines_configurations(tmp_path) -> None:
    paths = []
    for label, mode, factor in (("adaptive", "sweep", 1.0), ("ht+ht", "sweep", 2.0), ("adaptive", "trace", 1.0)):
        path = tmp_path / f"{label}-{mode}.json"
        path.write_text(json.dumps(_document(label, mode, factor)))
        paths.append(str(path))
    out = tmp_path / "plots"
    assert cli.main(["plot", *paths, "--out", str(out)]) == 0
    assert {p.name for p in out.glob("*.png")} == {"ttfp.png", "rtf.png", "throughput.png", "trace_ttfp.png"}
    rows = list(csv.DictReader((out / "combined.csv").open()))
    assert {row["label"] for row in rows} == {"adaptive", "ht+ht"}
    assert "| ht+ht | c4 | all |" in (out / "combined.md").read_text()


def test_plot_rejects_files_that_are_not_results(tmp_path) -> None:
    bogus = tmp_path / "x.json"
    bogus.write_text("{}")
    with pytest.raises(ValueError, match="not a"):
        cli.main(["plot", str(bogus), "--out", str(tmp_path)])
