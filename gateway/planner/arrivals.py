"""What arrives, per SLA class: counted where requests are admitted, smoothed off the hot path.

``ArrivalMeter.record`` is all a request pays: two integer additions in a per-class
tally. The planner's background loop calls ``sample`` every few seconds, which folds the
tallies since the last sample into exponentially decaying sums (time constant
``smoothing_s``): a request counts fully now and fades with age, so the rate follows a
change in traffic within about one time constant without jumping on one burst.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.types import SlaClass
from gateway.types.curve import audio_seconds_for
from gateway.types.view import RequestInfo


@dataclass(frozen=True, slots=True)
class ClassArrivals:
    """One class's smoothed arrivals: requests per second and their mean audio length."""

    rate: float
    audio_s: float  # mean predicted audio seconds per request (from its text length)
    requests: float  # requests in the smoothing window (decayed count)


@dataclass(frozen=True, slots=True)
class ArrivalMix:
    classes: dict[SlaClass, ClassArrivals]
    window_s: float  # the effective averaging window so far (grows to smoothing_s)

    @property
    def requests(self) -> float:
        return sum(c.requests for c in self.classes.values())


class ArrivalMeter:
    """Per-class tallies written on admission, folded into smoothed rates by ``sample``."""

    __slots__ = ("_counts", "_chars", "_decayed", "_decayed_audio", "_smoothing_s", "_started", "_last")

    def __init__(self, smoothing_s: float, now: float) -> None:
        self._counts = dict.fromkeys(SlaClass, 0)
        self._chars = dict.fromkeys(SlaClass, 0)
        self._decayed = dict.fromkeys(SlaClass, 0.0)
        self._decayed_audio = dict.fromkeys(SlaClass, 0.0)
        self._smoothing_s = smoothing_s
        self._started = self._last = now

    def record(self, request: RequestInfo) -> None:
        """One request reached admission (the hot path: no clock, no allocation)."""
        sla = request.sla_class
        self._counts[sla] += 1
        self._chars[sla] += request.input_chars

    def sample(self, now: float) -> ArrivalMix:
        """Fold the tallies in and return the smoothed mix (the planner's loop only)."""
        decay = math.exp(-max(0.0, now - self._last) / self._smoothing_s)
        for sla in SlaClass:
            count, chars = self._counts[sla], self._chars[sla]
            self._counts[sla] = self._chars[sla] = 0
            audio = audio_seconds_for(chars // count) * count if count else 0.0
            self._decayed[sla] = self._decayed[sla] * decay + count
            self._decayed_audio[sla] = self._decayed_audio[sla] * decay + audio
        self._last = now
        # A sum decaying with time constant tau over a history of length t holds
        # tau x (1 - e^(-t/tau)) seconds' worth of arrivals: the rate's denominator.
        window = self._smoothing_s * (1.0 - math.exp(-max(0.0, now - self._started) / self._smoothing_s))
        classes = {}
        for sla in SlaClass:
            count = self._decayed[sla]
            rate = count / window if window > 0 else 0.0
            audio_s = self._decayed_audio[sla] / count if count > 0 else 0.0
            classes[sla] = ClassArrivals(rate, audio_s, count)
        return ArrivalMix(classes, window)
