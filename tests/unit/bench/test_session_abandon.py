"""Judging the abandoned-sessions phase: nothing held once settled, and memory back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.bench import session_abandon
from gateway.bench.gateway_config import gateway_document
from gateway.bench.session_abandon import MIB, WAYS, gateway_timeouts, report_lines, rss_bound, targets
from gateway.bench.sessions import evaluate, targets_table
from gateway.bench.targets import ADAPTIVE, HT, RUN_ID
from gateway.config import GatewayConfig

LEAK_ROW = "200 sessions abandoned every way: sessions, slots, streams, tasks left"
RSS_ROW = "200 sessions abandoned every way: gateway RSS (MiB)"


def _reading(tasks: int = 8, rss_mib: float = 100.0, **held: int) -> dict[str, Any]:
    return {"sessions_open": 0, "inflight": 0, "queued": 0, "key_streams": 0, "worker_load": 0, "tasks": tasks,
            "rss_bytes": rss_mib * MIB, "open_fds": 18.0, **held}  # fmt: skip


def _result(after: dict[str, Any] | None = None, failed: dict[str, int] | None = None,
            settle_s: float | None = 0.2) -> dict[str, Any]:  # fmt: skip
    before = _reading()
    after = after if after is not None else _reading()
    return {"sessions": 200, "concurrency": 16, "warmup": 16, "ways": dict.fromkeys(WAYS, 25), "failed": failed or {},
            "errors": [], "abandoned_streaming": 150, "gateway_timeouts_s": {"idle_timeout_s": 3.0, "config_timeout_s": 3.0},
            "wall_s": 9.0, "settle_s": settle_s, "before": before, "after": after,
            "held_after": session_abandon._held(after, before)}  # fmt: skip


def _by_name(result: dict[str, Any] | None, error: str | None = None) -> dict[str, Any]:
    return {t.name: t for t in targets(result, error)}


def test_a_clean_phase_meets_both_rows() -> None:
    rows = _by_name(_result(_reading(rss_mib=102.0)))
    assert (rows[LEAK_ROW].value, rows[LEAK_ROW].passed) == (0, True)
    assert rows[RSS_ROW].value == pytest.approx(102.0) and rows[RSS_ROW].reference == pytest.approx(100.0)
    assert rows[RSS_ROW].bound == pytest.approx(105.0)  # 5% of 100 MiB is more than 4 MiB
    assert rows[RSS_ROW].passed is True


@pytest.mark.parametrize("held", [{"sessions_open": 1}, {"inflight": 2}, {"queued": 1}, {"key_streams": 1},
                                  {"worker_load": 1}, {"tasks": 9}])  # fmt: skip
def test_anything_held_after_settling_is_missed_and_counted(held: dict[str, int]) -> None:
    row = _by_name(_result(_reading(**held)))[LEAK_ROW]
    assert row.passed is False and row.value == next(iter(held.values())) - (8 if "tasks" in held else 0)


def test_fewer_tasks_than_before_is_not_a_leak() -> None:
    assert _by_name(_result(_reading(tasks=7)))[LEAK_ROW].passed is True


def test_sessions_that_were_not_abandoned_as_planned_or_a_gateway_that_never_settled_miss() -> None:
    assert _by_name(_result(failed={"idle": 1}))[LEAK_ROW].passed is False
    assert _by_name(_result(settle_s=None))[LEAK_ROW].passed is False


def test_memory_is_held_to_five_percent_or_four_mib_whichever_is_larger() -> None:
    assert rss_bound(40 * MIB) == 44 * MIB  # small process: 4 MiB
    assert rss_bound(200 * MIB) == 210 * MIB  # large one: 5%
    assert _by_name(_result(_reading(rss_mib=105.5)))[RSS_ROW].passed is False


def test_a_phase_that_did_not_run_is_missed_and_one_not_asked_for_is_unmeasured() -> None:
    rows = targets(None, "TimeoutError: ")
    assert len(rows) == 2 and all(row.passed is False for row in rows)
    assert targets(None) == []


def _documents(abandon: dict[str, Any] | None, runs: tuple[str, str] = ("r1", "r1")) -> list[dict[str, Any]]:
    def document(label: str, run: str) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "label": label,
            "mode": "sessions",
            "time_scale": 0.25,
            "notes": {RUN_ID: run},
            "phases": [],
        }
        if abandon is not None:
            doc["abandon"] = abandon
        return doc

    return [document(ADAPTIVE, runs[0]), document(HT, runs[1])]


def test_the_session_targets_judge_the_adaptive_phase() -> None:
    found, unmeasured = evaluate(_documents(_result()))
    found = [t for t in found if "abandoned" in t.name]
    assert [t.name for t in found] == [LEAK_ROW, RSS_ROW] and all(t.passed for t in found)
    assert unmeasured == []
    table = "\n".join(targets_table(_documents(_result())))
    assert f"| {LEAK_ROW} | 0 | 0 | = | 0 | yes |" in table
    found, unmeasured = evaluate(_documents(None))
    assert not [t for t in found if "abandoned" in t.name] and unmeasured and "abandoned" in unmeasured[0]
    found, _ = evaluate(_documents(_result(), runs=("r1", "r2")))
    assert found and all(t.passed is None for t in found)


def test_the_report_has_a_row_per_measured_setup() -> None:
    lines = report_lines(_documents(_result(_reading(tasks=8, rss_mib=101.0))))
    assert lines[0] == "## Abandoned sessions"
    assert "| adaptive | 0 | 150 | 0.2 | 0 | 8 / 8 | 100.0 / 101.0 | 18 / 18 |" in lines
    assert report_lines(_documents(None)) == []


def test_the_gateway_gets_short_timers_but_longer_than_the_pause_between_replies(tmp_path: Path) -> None:
    assert gateway_timeouts(0.25) == {"idle_timeout_s": 3.0, "config_timeout_s": 3.0}
    assert gateway_timeouts(2.0)["idle_timeout_s"] == 8.0
    document = gateway_document(
        1, tmp_path, ["http://a:1"], ["http://b:1"], "adaptive", sessions=gateway_timeouts(0.25)
    )
    assert GatewayConfig(**document).sessions.idle_timeout_s == 3.0
