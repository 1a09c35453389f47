"""Audio delivered and load carried over one run's clock, from each request's chunks.

A sustained run has no natural phase boundary: the window that is measured starts and ends
with streams in flight. Counting each chunk when it arrived (not each request when it
ended) gives the audio a fleet delivered inside any window exactly, whatever was in flight
at its edges. Times here are wall seconds on the run's clock unless a ``time_scale`` is
given; results come out in modelled units, as every report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gateway.bench.client import RequestResult
from gateway.bench.runner import PhaseResult
from gateway.bench.stats import audio_seconds


def on_run_clock(phase: PhaseResult, origin: float) -> list[RequestResult]:
    """The phase's requests with ``sent_s`` counted from ``origin`` (the run's start on the
    same clock as the phase's) instead of from the phase start. Changes them in place."""
    shift = phase.started_at - origin
    for result in phase.results:
        result.sent_s += shift
    return phase.results


def delivered_audio_s(results: Iterable[RequestResult], start_s: float, end_s: float) -> float:
    """Audio seconds whose chunks arrived within [start_s, end_s) (needs the chunks kept)."""
    pcm = 0
    for result in results:
        for offset, size in result.chunks:
            if start_s <= result.sent_s + offset < end_s:
                pcm += size
    return audio_seconds(pcm)


def audio_rate(results: Sequence[RequestResult], start_s: float, end_s: float, time_scale: float = 1.0) -> float:
    """Audio seconds per modelled second delivered within a wall window."""
    if end_s <= start_s:
        raise ValueError("the window must have a positive length")
    return delivered_audio_s(results, start_s, end_s) / ((end_s - start_s) / time_scale)


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def windows(results: Sequence[RequestResult], end_s: float, window_s: float, time_scale: float = 1.0) -> list[dict[str, Any]]:
    """One row per modelled window up to ``end_s`` (wall): audio-s/s delivered, the mean
    number of requests in flight (the load), requests sent and failed."""
    if window_s <= 0 or time_scale <= 0:
        raise ValueError("window and time scale must be positive")
    wall_window = window_s * time_scale
    count = max(1, int(-(-end_s // wall_window)))
    rows = []
    for index in range(count):
        start, stop = index * wall_window, (index + 1) * wall_window
        sent = [r for r in results if start <= r.sent_s < stop]
        busy = sum(_overlap(r.sent_s, r.sent_s + (r.e2e_s or 0.0), start, stop) for r in results)
        rows.append({
            "start_s": index * window_s,
            "audio_s_per_s": delivered_audio_s(results, start, stop) / window_s,
            "in_flight": busy / wall_window,
            "sent": len(sent),
            "errors": sum(1 for r in sent if not r.ok),
        })  # fmt: skip
    return rows


def failed_during(results: Iterable[RequestResult], spans: Sequence[tuple[float, float]]) -> tuple[int, int]:
    """Requests in flight at some time within one of ``spans`` (wall, run clock): (all, failed)."""
    total = failed = 0
    for result in results:
        done = result.sent_s + (result.e2e_s or 0.0)
        if any(_overlap(result.sent_s, done, a, b) > 0 or a <= result.sent_s <= b for a, b in spans):
            total += 1
            failed += 0 if result.ok else 1
    return total, failed
