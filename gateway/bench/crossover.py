"""Where the low-latency pool stops beating the high-throughput one: pure analysis.

Input: one metric (lower is better: RTF or TTFP) per per-worker concurrency for each
pool. Output: the crossing point and the thresholds it implies. The low-latency profile
wins at small batches (CUDA graphs) and loses as batches grow (padding to captured sizes,
prefill steps without graphs), so its lead is a prefix of the concurrency axis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Crossover:
    last_win: int | None  # largest measured level up to which low-latency led at every level
    first_loss: int | None  # first measured level where it did not
    crossing: float | None  # interpolated concurrency where the two curves meet (None: never met)

    @property
    def slots_per_worker(self) -> int:
        """Requests a low-latency worker should carry: the last concurrency it still wins at."""
        if self.crossing is not None:
            return max(1, math.floor(self.crossing + 1e-9))  # 6.9999... from float noise is 7
        return self.last_win or 1


def find_crossover(low_latency: Mapping[int, float], high_throughput: Mapping[int, float]) -> Crossover:
    """Compare the pools at the levels both measured; ties count as a loss for low-latency."""
    levels = sorted(set(low_latency) & set(high_throughput))
    if not levels:
        raise ValueError("the pools share no measured concurrency level")
    last_win: int | None = None
    for level in levels:
        if low_latency[level] < high_throughput[level]:
            last_win = level
            continue
        if last_win is None:
            return Crossover(None, level, None)
        before = low_latency[last_win] - high_throughput[last_win]  # < 0
        after = low_latency[level] - high_throughput[level]  # >= 0
        crossing = last_win + (level - last_win) * (-before) / (after - before)
        return Crossover(last_win, level, crossing)
    return Crossover(last_win, None, None)


def balanced_threshold(slots_per_worker: int, low_latency_workers: int) -> int:
    """Fleet-wide live concurrency at which `balanced` traffic should leave low-latency:
    the moment every low-latency worker carries its recommended share."""
    return slots_per_worker * max(1, low_latency_workers)
