"""The numbers a TTS benchmark reports, as pure functions of what the client observed.

Definitions follow vllm-omni's own serving benchmark so figures are comparable:
TTFP = request sent -> first non-empty body chunk; RTF = end-to-end latency / audio
duration with duration = PCM bytes / 2 / 24000; audio throughput = total audio seconds
/ wall seconds; underrun = the worst gap a real-time player starting at the first chunk
would suffer. Nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gateway.types.codec import BYTES_PER_SECOND


def audio_seconds(pcm_bytes: int) -> float:
    """Duration of 24 kHz mono s16le PCM."""
    return pcm_bytes / BYTES_PER_SECOND


def rtf(e2e_s: float, pcm_bytes: int) -> float | None:
    """Real-time factor; None when there is no audio to divide by."""
    duration = audio_seconds(pcm_bytes)
    return e2e_s / duration if duration > 0 else None


def worst_underrun(chunks: Sequence[tuple[float, int]]) -> float:
    """Longest stall of a player that starts playing at the first chunk.

    ``chunks`` are (arrival time s, bytes) in arrival order. The player plays at real
    time; when its buffer runs dry it waits for the next chunk and resumes from there
    (a stall does not eat into later audio), exactly as a streaming audio sink would.
    """
    if not chunks:
        return 0.0
    playable_until = chunks[0][0] + audio_seconds(chunks[0][1])
    worst = 0.0
    for arrival, size in chunks[1:]:
        if arrival > playable_until:
            worst = max(worst, arrival - playable_until)
            playable_until = arrival
        playable_until += audio_seconds(size)
    return worst


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default method), q in [0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    return float(np.percentile(values, q))  # ValueError for q outside [0, 100]


@dataclass(frozen=True, slots=True)
class Summary:
    """Mean, median and tail of one metric over a set of requests."""

    count: int
    mean: float | None
    median: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            return cls(0, None, None, None, None)
        median, p99 = np.percentile(values, [50, 99])
        return cls(
            count=len(values),
            mean=math.fsum(values) / len(values),
            median=float(median),
            p99=float(p99),
            max=max(values),
        )

    def scaled(self, factor: float) -> Summary:
        """The same summary with every value multiplied (e.g. to modelled time)."""

        def mul(value: float | None) -> float | None:
            return None if value is None else value * factor

        return Summary(self.count, mul(self.mean), mul(self.median), mul(self.p99), mul(self.max))


def throughput(total_audio_s: float, wall_s: float) -> float:
    """Audio seconds produced per wall second."""
    return total_audio_s / wall_s if wall_s > 0 else 0.0
