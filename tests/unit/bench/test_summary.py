"""Phase summaries, unit conversion and the rendered reports, from synthetic requests."""

from __future__ import annotations

import csv
import io

import pytest

from gateway.bench import report
from gateway.bench.client import RequestResult
from gateway.bench.summary import PhaseResult, summarize_phase

SECOND = 48_000


def _ok(ttfp: float, e2e: float, seconds: float, pool: str | None, sla: str | None = None) -> RequestResult:
    return RequestResult(sla, 100, 0.0, 200, None, pool, ttfp, e2e, int(seconds * SECOND), 0.0)


def _phase() -> PhaseResult:
    results = [
        _ok(0.1, 1.0, 4.0, "low_latency", "latency"),
        _ok(0.3, 3.0, 6.0, "high_throughput", "throughput"),
        _ok(0.2, 2.0, 10.0, "high_throughput", "throughput"),
        RequestResult("latency", 50, 0.0, 503, "http_503", None),
        RequestResult("throughput", 50, 0.0, None, "transport:ClientOSError", None),
    ]
    return PhaseResult("c4", "closed", 4, wall_s=4.0, client_cpu_s=0.05, results=results)


def test_every_request_is_counted_once_as_ok_or_error() -> None:
    summary = summarize_phase(_phase())
    assert summary["sent"] == 5 and summary["ok"] == 3
    assert summary["errors"] == {"http_503": 1, "transport:ClientOSError": 1}
    assert summary["ok"] + sum(summary["errors"].values()) == summary["sent"]
    assert summary["pools"] == {"high_throughput": 2, "low_latency": 1}


def test_metrics_are_computed_over_successful_requests() -> None:
    summary = summarize_phase(_phase())
    assert summary["audio_s"] == pytest.approx(20.0)
    assert summary["audio_s_per_s"] == pytest.approx(5.0)  # 20 s of audio in 4 s
    assert summary["ttfp_s"]["median"] == pytest.approx(0.2)
    assert summary["rtf"]["mean"] == pytest.approx((0.25 + 0.5 + 0.2) / 3)
    assert summary["client_cpu_ms_per_request"] == pytest.approx(10.0)


def test_per_class_breakdown_when_classes_are_sent() -> None:
    by_class = summarize_phase(_phase())["by_class"]
    assert set(by_class) == {"latency", "throughput"}
    assert by_class["latency"]["sent"] == 2 and by_class["latency"]["ok"] == 1
    assert by_class["throughput"]["pools"] == {"high_throughput": 2}


def test_no_class_breakdown_without_class_headers() -> None:
    phase = PhaseResult("c1", "closed", 1, 1.0, 0.0, [_ok(0.1, 1.0, 4.0, None)])
    summary = summarize_phase(phase)
    assert "by_class" not in summary
    assert summary["pools"] == {"none": 1}


def test_time_scale_converts_to_modelled_units() -> None:
    # An emulator at time scale 0.1 runs ten times faster than the modelled GPU.
    summary = summarize_phase(_phase(), time_scale=0.1)
    assert summary["ttfp_s"]["median"] == pytest.approx(2.0)
    assert summary["rtf"]["mean"] == pytest.approx(10 * (0.25 + 0.5 + 0.2) / 3)
    assert summary["audio_s"] == pytest.approx(20.0)  # audio itself is never scaled
    assert summary["audio_s_per_s"] == pytest.approx(0.5)


def _document() -> dict:
    return {
        "schema": report.SCHEMA, "label": "adaptive", "mode": "sweep", "url": "http://x", "time_scale": 1.0,
        "phases": [summarize_phase(_phase())],
    }


def test_csv_has_a_row_per_phase_and_per_class() -> None:
    rows = list(csv.DictReader(io.StringIO(report.to_csv([_document()]))))
    assert [row["sla_class"] for row in rows] == ["all", "latency", "throughput"]
    assert rows[0]["ok"] == "3" and rows[0]["ttfp_p50_ms"] == "200"
    assert rows[0]["errors"] == "http_503:1 transport:ClientOSError:1"


def test_markdown_table_lists_every_row(tmp_path) -> None:
    markdown = report.to_markdown([_document()])
    assert markdown.count("| adaptive | c4 |") == 3
    paths = report.write(_document(), tmp_path, "adaptive-sweep")
    assert [p.suffix for p in paths] == [".json", ".csv", ".md"]
    assert report.load(paths[0])["label"] == "adaptive"


def test_a_phase_counts_why_its_requests_went_where_they_went() -> None:
    results = [_ok(0.1, 1.0, 4.0, "low_latency"), _ok(0.1, 1.0, 4.0, "low_latency"), _ok(0.2, 2.0, 4.0, "high_throughput")]
    results[0].route_reason = results[1].route_reason = "fastest"
    results[2].route_reason = "latency_reserve"
    summary = summarize_phase(PhaseResult("c2", "closed", 2, wall_s=2.0, client_cpu_s=0.0, results=results))
    assert summary["route_reasons"] == {"high_throughput: latency_reserve": 1, "low_latency: fastest": 2}
