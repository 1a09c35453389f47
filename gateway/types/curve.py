"""A worker's predicted behaviour by load: the data the routing policy decides on.

``Curve`` answers, for a worker carrying ``n`` requests (the new one included): how long
one Stage 0 decode step takes (each step yields one 40 ms codec frame for every running
request, so a stream's real-time factor is ``25 x step``), and the time to first packet of
a request that arrives to make it ``n``. Both are plain tuples indexed by load, so a
policy reads them in O(1) with no I/O; ``performance.PerformanceModel`` produces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.types.codec import FRAMES_PER_SECOND, FRAME_SECONDS
# English speech runs at about 15 characters per second of audio: the request's length
# is all routing knows of its cost before it runs.
CHARS_PER_AUDIO_SECOND = 15.0


def audio_seconds_for(input_chars: int) -> float:
    return max(1, input_chars) / CHARS_PER_AUDIO_SECOND


@dataclass(frozen=True, slots=True)
class Curve:
    """Predictions for loads ``1 .. max_load`` (index ``n - 1``); monotone in load.

    ``max_load`` is the worker's ``max_num_seqs``: past it the worker queues requests
    itself, which shows as a growing TTFP, not as a faster step. Derived tables (RTF,
    delivered rate) are computed once here, so a decision over many workers only indexes.
    """

    step_s: tuple[float, ...]
    ttfp_s: tuple[float, ...]
    rtf_s: tuple[float, ...] = field(init=False, repr=False, compare=False)
    rate_s: tuple[float, ...] = field(init=False, repr=False, compare=False)
    # What one more stream costs at each load, for the policy's per-worker loops:
    # marginal_step_s[L] = the new stream's step plus the slowdown it adds to the L already
    # there (balanced's cost per frame); gain_s[L] = delivered rate added (throughput's score).
    marginal_step_s: tuple[float, ...] = field(init=False, repr=False, compare=False)
    gain_s: tuple[float, ...] = field(init=False, repr=False, compare=False)
    # The largest load it describes (the engine's max_num_seqs): read on every lookup.
    max_load: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.step_s or len(self.step_s) != len(self.ttfp_s):
            raise ValueError("a curve needs as many TTFP as step values, at least one")
        object.__setattr__(self, "max_load", len(self.step_s))
        object.__setattr__(self, "rtf_s", tuple(step * FRAMES_PER_SECOND for step in self.step_s))
        rates = tuple(n * FRAME_SECONDS / step for n, step in enumerate(self.step_s, start=1))
        object.__setattr__(self, "rate_s", rates)
        steps = self.step_s
        marginal = tuple(step + load * (step - steps[load - 1]) if load else step for load, step in enumerate(steps))
        object.__setattr__(self, "marginal_step_s", marginal)
        object.__setattr__(self, "gain_s", tuple(rate - (rates[i - 1] if i else 0.0) for i, rate in enumerate(rates)))

    def step(self, load: int) -> float:
        return self.step_s[min(max(load, 1), self.max_load) - 1]

    def rtf(self, load: int) -> float:
        """Real-time factor of every stream while the worker carries ``load`` requests."""
        return self.rtf_s[min(max(load, 1), self.max_load) - 1]

    def ttfp(self, load: int) -> float:
        if load <= self.max_load:
            return self.ttfp_s[max(load, 1) - 1]
        # Beyond max_num_seqs the request waits in the worker's queue for a stream to end:
        # each request ahead of it costs about a full clip's share of the batch.
        queued = load - self.max_load
        return self.ttfp_s[-1] + queued * self.step_s[-1] * _TYPICAL_FRAMES / self.max_load

    def rate(self, load: int) -> float:
        """Audio seconds per second the worker delivers with ``load`` streams running."""
        if load <= 0:
            return 0.0
        return self.rate_s[min(load, self.max_load) - 1]


# A clip of the benchmark's typical length (8 s of audio): what a queued request waits for.
_TYPICAL_FRAMES = 200
