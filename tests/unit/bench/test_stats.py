"""The benchmark's statistics on inputs whose answers are known by hand."""

from __future__ import annotations

import math

import pytest

from gateway.bench.stats import Summary, audio_seconds, percentile, rtf, throughput, worst_underrun

SECOND = 48_000  # bytes of 24 kHz mono s16le PCM per second of audio


def test_audio_duration_is_bytes_over_two_over_24000() -> None:
    assert audio_seconds(48_000) == 1.0
    assert audio_seconds(1920) == pytest.approx(0.04)  # one 40 ms codec frame
    assert audio_seconds(0) == 0.0


def test_rtf_is_e2e_over_audio_duration() -> None:
    assert rtf(2.0, 4 * SECOND) == pytest.approx(0.5)
    assert rtf(1.0, 0) is None


def test_percentile_interpolates_linearly_like_numpy() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0  # order does not matter
    assert percentile([7.0], 99) == 7.0


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summary_of_values_and_of_nothing() -> None:
    summary = Summary.of([1.0, 2.0, 3.0, 10.0])
    assert summary.count == 4
    assert summary.mean == pytest.approx(4.0)
    assert summary.median == pytest.approx(2.5)
    assert summary.p99 == pytest.approx(3 + 7 * 0.97)
    assert summary.max == 10.0
    assert Summary.of([]) == Summary(0, None, None, None, None)


def test_summary_scaled_multiplies_every_value() -> None:
    scaled = Summary.of([1.0, 3.0]).scaled(10)
    assert (scaled.mean, scaled.median, scaled.max) == (20.0, 20.0, 30.0)
    assert scaled.count == 2
    assert Summary.of([]).scaled(10).mean is None


def test_no_underrun_when_audio_arrives_faster_than_it_plays() -> None:
    # 40 ms first frame, then one second of audio every 0.5 s: always ahead of the player.
    chunks = [(0.10, 1920), (0.12, SECOND), (0.62, SECOND), (1.12, SECOND)]
    assert worst_underrun(chunks) == 0.0


def test_underrun_is_the_gap_after_the_buffer_runs_dry() -> None:
    # The first frame plays 0.10-0.14 s; the next chunk arrives at 0.50 s: a 0.36 s stall.
    # Playback resumes at 0.50 with 1 s buffered (until 1.50); the last chunk at 1.60 adds 0.10 s.
    chunks = [(0.10, 1920), (0.50, SECOND), (1.60, SECOND)]
    assert worst_underrun(chunks) == pytest.approx(0.36)


def test_a_stall_shifts_playback_so_later_gaps_are_not_double_counted() -> None:
    # Without the shift, the last chunk (at 2.4 s) would look 1.26 s late against a
    # player that started at 0.1; with it, the player only waits 0.4 s there.
    chunks = [(0.1, 1920), (1.0, SECOND), (2.4, SECOND)]
    assert worst_underrun(chunks) == pytest.approx(0.86)


def test_underrun_of_nothing_or_one_chunk_is_zero() -> None:
    assert worst_underrun([]) == 0.0
    assert worst_underrun([(0.2, SECOND)]) == 0.0


def test_throughput_is_audio_seconds_per_wall_second() -> None:
    assert throughput(120.0, 10.0) == pytest.approx(12.0)
    assert throughput(5.0, 0.0) == 0.0
    assert not math.isnan(throughput(0.0, 1.0))
