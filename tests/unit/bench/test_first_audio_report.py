"""``bench first-audio``: the summary over pcm and the targets it judges."""

from __future__ import annotations

from pathlib import Path

from gateway.bench.first_audio import Cell, _summary, write_report


def _cells() -> list[Cell]:
    cells = []
    for fmt in ("pcm", "mp3"):
        for speed in (1.0, 0.8):
            extra = 0.0 if fmt == "pcm" else 20.0 if speed == 0.8 else 5.0
            cells.append(Cell(fmt, speed, [220.0 + extra, 230.0 + extra], [225.0 + extra] * 2))
    return cells


def test_added_is_over_pcm_at_speed_one_and_targets_judge_the_issue_cells(tmp_path: Path) -> None:
    rows = _summary(_cells())
    mp3 = next(r for r in rows if r["format"] == "mp3" and r["speed"] == 1.0)
    assert mp3["added_p50_ms"] == 5.0 and mp3["prediction_error"] < 0.01
    document = {"command": "higgs-gateway bench first-audio", "machine": "2-core", "load_before": 0.5,
                "load_after": {"c1": 0.6}, "levels": {"c1": rows}}  # fmt: skip
    text = write_report(document, tmp_path / "README.md").read_text()
    # Judged: mp3 at speed 1 (+5 ms) and pcm at 0.8 (+0); mp3 at 0.8 (+20 ms) is not in the target.
    assert "**2 of 2 met**" in text
    assert "**4 of 4 met**" in text  # the header within 10% in every cell
