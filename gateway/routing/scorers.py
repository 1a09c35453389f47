"""Scorers: a float per candidate, lower is better (the second stage of every decision).

The predicting scorers read the worker's curve at the load this request would make (with
``L`` requests there, index ``L`` is the prediction for ``L + 1``), so a score is a
prediction in seconds (or seconds per second); the picker compares them with one tie rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.types.view import WorkerLoad

Scorer = Callable[[Sequence[WorkerLoad]], list[float]]


def predicted_ttfp(workers: Sequence[WorkerLoad]) -> list[float]:
    """`latency`: the time to first packet there."""
    return [w.curve.ttfp_s[w.load] for w in workers]  # type: ignore[union-attr]


def own_time_plus_delay(frames: float) -> Scorer:
    """`balanced`: the request's own end-to-end time (TTFP + frames x its step) plus the
    delay its slower step adds to the streams already there (``Curve.marginal_step_s``).
    Counting the others' delay is what spreads a busy fleet the way that maximises its
    throughput instead of piling onto the worker that looks fastest alone."""

    def score(workers: Sequence[WorkerLoad]) -> list[float]:
        return [w.curve.ttfp_s[w.load] + frames * w.curve.marginal_step_s[w.load] for w in workers]  # type: ignore[union-attr]

    return score


def delay_to_others(frames: float) -> Scorer:
    """A deadline sentence: only what it costs the streams already on the worker (the
    slowdown its step adds to each, over its frames). Its own time does not count once the
    deadline is met: arriving earlier than playback needs it buys nothing."""

    def score(workers: Sequence[WorkerLoad]) -> list[float]:
        return [frames * (w.curve.marginal_step_s[w.load] - w.curve.step_s[w.load]) for w in workers]  # type: ignore[union-attr]

    return score


def throughput_lost(workers: Sequence[WorkerLoad]) -> list[float]:
    """`throughput`: minus the audio-seconds per second the worker's delivery grows by."""
    return [-w.curve.gain_s[w.load] for w in workers]  # type: ignore[union-attr]


def fewest_in_flight(workers: Sequence[WorkerLoad]) -> list[float]:
    """Spread load inside a pool: the worker carrying the fewest requests wins."""
    return [float(w.load) for w in workers]


def most_free_slots(workers: Sequence[WorkerLoad]) -> list[float]:
    """Profile-blind: the worker with the most room left wins (differs when slots differ)."""
    return [-float(w.free) for w in workers]


def indifferent(workers: Sequence[WorkerLoad]) -> list[float]:
    """Every candidate ties, so the picker's round-robin alone decides."""
    return [0.0] * len(workers)
