"""Audio delivered inside a window of a run, from chunk arrival times (no sockets, no clocks)."""

from __future__ import annotations

import pytest

from gateway.bench.client import RequestResult
from gateway.bench.stats import audio_seconds
from gateway.bench.summary import PhaseResult, audio_rate, delivered_audio_s, failed_during, on_run_clock, windows

SECOND = round(1 / audio_seconds(1))  # PCM bytes per audio second


def request(sent: float, chunks: list[tuple[float, int]], error: str | None = None) -> RequestResult:
    e2e = chunks[-1][0] if chunks else 0.5
    return RequestResult(None, 10, sent, 200, error, "high_throughput", chunks[0][0] if chunks else None, e2e,
                         sum(size for _, size in chunks), chunks=chunks)  # fmt: skip


def test_only_the_chunks_that_arrived_inside_the_window_count() -> None:
    # Two streams straddle the window [1, 3): half of each falls inside.
    results = [request(0.0, [(0.5, SECOND), (1.5, SECOND)]), request(2.0, [(0.5, SECOND), (1.5, SECOND)])]
    assert delivered_audio_s(results, 1.0, 3.0) == pytest.approx(2.0)
    # At time scale 0.5 the 2 wall seconds are 4 modelled ones.
    assert audio_rate(results, 1.0, 3.0, time_scale=0.5) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        audio_rate(results, 3.0, 3.0)


def test_phase_times_move_to_the_run_clock() -> None:
    phase = PhaseResult("c4", "closed", 4, 1.0, 0.0, [request(0.25, [(0.1, SECOND)])], started_at=12.0)
    (result,) = on_run_clock(phase, origin=10.0)
    assert result.sent_s == pytest.approx(2.25)


def test_windows_give_delivery_load_and_failures_per_modelled_window() -> None:
    results = [request(0.0, [(1.0, SECOND), (1.5, SECOND)]), request(0.5, [], error="http_503")]
    rows = windows(results, end_s=2.0, window_s=2.0, time_scale=0.5)  # 1 wall second per row
    assert [row["start_s"] for row in rows] == [0.0, 2.0]
    assert rows[0]["sent"] == 2 and rows[0]["errors"] == 1 and rows[1]["sent"] == 0
    assert rows[1]["audio_s_per_s"] == pytest.approx(1.0)  # both chunks arrive in [1, 2) wall: 2 s / 2 modelled s
    assert rows[0]["in_flight"] == pytest.approx(1.5)  # one for the whole second, the failed one for half


def test_requests_in_flight_during_a_change_are_counted_with_their_failures() -> None:
    before = request(0.0, [(1.0, SECOND)])  # ends at 1.0
    during = request(1.5, [(1.0, SECOND)], error="transport:ClientOSError")
    after = request(5.0, [(1.0, SECOND)])
    assert failed_during([before, during, after], [(2.0, 4.0)]) == (1, 1)
    assert failed_during([before, during, after], []) == (0, 0)
