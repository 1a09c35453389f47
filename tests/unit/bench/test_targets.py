"""The targets table judges a comparison only when every setup in it was measured in one run."""

from __future__ import annotations

from typing import Any

from gateway.bench.compare import chosen_setups
from gateway.bench.targets import ADAPTIVE, HT, LL, RUN_ID, evaluate, targets_table


def _phase(concurrency: int | None, audio: float, ttfp_p99: float = 0.3, load: float = 0.5) -> dict[str, Any]:
    stats = {"mean": 0.3, "median": 0.2, "p99": ttfp_p99}
    return {"concurrency": concurrency, "audio_s_per_s": audio, "rtf": {"mean": 0.3, "median": 0.3, "p99": 0.9},
            "ttfp_s": stats, "errors": {}, "loadavg_1m": load,
            "by_class": {"throughput": {"audio_s_per_s": audio, "ttfp_s": stats, "rtf": stats}}}  # fmt: skip


def _sweep(label: str, audio_by_level: dict[int, float], run: str | None) -> dict[str, Any]:
    notes = {} if run is None else {RUN_ID: run}
    return {"label": label, "mode": "sweep", "params": {}, "notes": notes, "created": "2026-12-01T00:00:00+00:00",
            "phases": [_phase(level, audio) for level, audio in audio_by_level.items()]}  # fmt: skip


def _trace(label: str, ttfp_p99: float, run: str | None) -> dict[str, Any]:
    return {"label": label, "mode": "trace", "params": {"kind": "bursty"}, "notes": {RUN_ID: run} if run else {},
            "phases": [_phase(None, 10.0, ttfp_p99)]}  # fmt: skip


def _fleets(runs: tuple[str | None, str | None, str | None], adaptive_c16: float = 20.0) -> list[dict[str, Any]]:
    mine, ht, ll = runs
    return [
        _sweep(ADAPTIVE, {16: adaptive_c16}, mine),
        _sweep(HT, {16: 19.0}, ht),
        _sweep(LL, {16: 21.0}, ll),
    ]


def test_one_run_is_judged_with_the_share_of_its_level() -> None:
    [c16] = evaluate(_fleets(("r1", "r1", "r1"), adaptive_c16=19.8))
    assert c16.relation == ">= 94% of" and c16.reference == 21.0
    assert c16.passed is True  # 19.8 >= 0.94 x 21
    [missed] = evaluate(_fleets(("r1", "r1", "r1"), adaptive_c16=19.6))
    assert missed.passed is False
    assert "1 of 1 met" not in "\n".join(targets_table(_fleets(("r1", "r1", "r1"), adaptive_c16=19.6)))


def test_a_setup_from_another_run_makes_every_target_not_comparable() -> None:
    documents = _fleets(("r2", "r1", "r1"))
    assert [t.passed for t in evaluate(documents)] == [None]
    table = "\n".join(targets_table(documents))
    assert "**Not comparable**" in table and "| not comparable |" in table
    assert "| adaptive | sweep | r2 |" in table and "| ll+ll | sweep | r1 |" in table  # each row's run shown


def test_documents_without_a_run_id_are_never_judged() -> None:
    assert [t.passed for t in evaluate(_fleets((None, None, None)))] == [None]


def test_throughput_may_not_wait_more_than_three_times_longer_than_on_two_ht_workers() -> None:
    documents = [_trace(ADAPTIVE, 1.3, "r"), _trace(HT, 0.4, "r"), *_fleets(("r", "r", "r"))]
    waiting = next(t for t in evaluate(documents) if t.name == "bursty: throughput TTFP p99 vs ht+ht")
    assert waiting.passed is False and waiting.bound == 0.4 * 3.0
    documents[0] = _trace(ADAPTIVE, 1.1, "r")
    assert next(t for t in evaluate(documents) if t.name == waiting.name).passed is True


def test_adaptive_brings_its_references_unless_told_not_to() -> None:
    assert [s.name for s in chosen_setups("adaptive")] == ["adaptive", "ht+ht", "ll+ll"]
    assert [s.name for s in chosen_setups("adaptive", references=False)] == ["adaptive"]
    assert [s.name for s in chosen_setups("rules")] == ["rules"]
