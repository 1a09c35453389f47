"""``bench first-audio``: the summary over pcm and the targets it judges."""

from __future__ import annotations

from pathlib import Path

from gateway.audio import AudioFormat, open_encoder
from gateway.bench.first_audio import SCHEMA, Cell, _summary, decoded_seconds, write_report


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


def test_decoded_lengths_are_against_pcm_at_the_same_speed_and_round(tmp_path: Path) -> None:
    cells = _cells()
    for cell in cells:
        # Round 0 and 1 speak different texts (2.0 s and 3.0 s at speed 1); mp3 adds 90 ms.
        over = 0.09 if cell.fmt == "mp3" else 0.0
        cell.decoded_s = {0: 2.0 / cell.speed + over, 1: 3.0 / cell.speed + over}
    next(c for c in cells if c.fmt == "mp3" and c.speed == 0.8).decoded_s[1] += 0.01  # furthest: +100 ms
    rows = _summary(cells)
    mp3 = {r["speed"]: r for r in rows if r["format"] == "mp3"}
    assert mp3[1.0]["decoded_over_pcm_p50_ms"] == 90.0 and mp3[0.8]["decoded_over_pcm_max_ms"] == 100.0
    document = {"schema": SCHEMA, "command": "higgs-gateway bench first-audio", "machine": "2-core", "load_before": 0.5,
                "load_after": {"c1": 0.6}, "levels": {"c1": rows}}  # fmt: skip
    text = write_report(document, tmp_path / "README.md").read_text()
    assert "predates" not in text
    assert "of pcm's at the same speed and text" in text and "**0 of 2 met** (furthest: mp3 x0.8, +100.0 ms)" in text
    assert "| +90.0 ms | +90.0 ms |" in text and "| +95.0 ms | +100.0 ms |" in text  # p50, furthest


def test_a_run_without_decoded_lengths_renders_as_before(tmp_path: Path) -> None:
    document = {"command": "higgs-gateway bench first-audio", "machine": "2-core", "load_before": 0.5,
                "load_after": {"c1": 0.6}, "levels": {"c1": _summary(_cells())}}  # fmt: skip
    text = write_report(document, tmp_path / "README.md").read_text()
    assert "decoded over pcm" not in text and "decoded length" not in text
    assert "This run predates the decoded-length measurement" in text  # an earlier schema's method, said so


def test_decoded_seconds_reads_pcm_raw_and_decodes_the_codecs() -> None:
    pcm = bytes(48_000)  # 1 s of silence, 24 kHz s16le
    assert decoded_seconds("pcm", pcm) == 1.0
    encoder = open_encoder(AudioFormat.FLAC, early_start=False)
    flac = encoder.encode(pcm) + encoder.finish()
    assert decoded_seconds("flac", flac) == 1.0  # lossless: every sample back
