"""What arrives, per SLA class: counted where requests are admitted, smoothed off the hot path.

``ArrivalMeter.record`` is all a request pays: two integer additions in a per-class
tally. The planner's background loop calls ``sample`` every few seconds, which folds the
tallies since the last sample into exponentially decaying sums (time constant
``smoothing_s``): a request counts fully now and fades with age, so the rate follows a
change in traffic within about one time constant without jumping on one burst.

A smoothed rate lags a change: on a ramp, an average with time constant ``tau`` reads the
rate of ``tau`` seconds ago, and a worker asked for now serves only after its provisioning
delay. With ``forecast_s`` the meter also keeps a second average with twice the time
constant; the two lag a linear ramp by ``tau`` and ``2 tau``, so their difference over
``tau`` is the ramp's slope, and the rate is forecast ``forecast_s`` ahead of now: the
smoothed rate plus the slope times (``tau`` + ``forecast_s``), never below zero. (Dynamo's
planner forecasts the next interval's load the same way in spirit: size for the traffic the
new workers will meet, not the traffic the average last saw.)
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
    trend: float = 0.0  # the rate's slope (requests per second, per second); 0 without a forecast


@dataclass(frozen=True, slots=True)
class ArrivalMix:
    classes: dict[SlaClass, ClassArrivals]
    window_s: float  # the effective averaging window so far (grows to smoothing_s)

    @property
    def requests(self) -> float:
        return sum(c.requests for c in self.classes.values())


class ArrivalMeter:
    """Per-class tallies written on admission, folded into smoothed rates by ``sample``."""

    __slots__ = ("_counts", "_chars", "_decayed", "_decayed_rate", "_decayed_slow", "_decayed_audio", "_smoothing_s",
                 "_forecast_s", "_started", "_last")  # fmt: skip

    def __init__(self, smoothing_s: float, now: float, forecast_s: float = 0.0) -> None:
        self._counts = dict.fromkeys(SlaClass, 0)
        self._chars = dict.fromkeys(SlaClass, 0)
        self._decayed = dict.fromkeys(SlaClass, 0.0)  # whole requests, fading: the window's count
        self._decayed_rate = dict.fromkeys(SlaClass, 0.0)  # each weighed by its decay since it arrived
        self._decayed_slow = dict.fromkeys(SlaClass, 0.0)  # time constant 2 x smoothing_s
        self._decayed_audio = dict.fromkeys(SlaClass, 0.0)
        self._smoothing_s = smoothing_s
        self._forecast_s = forecast_s
        self._started = self._last = now

    def record(self, request: RequestInfo) -> None:
        """One request reached admission (the hot path: no clock, no allocation)."""
        sla = request.sla_class
        self._counts[sla] += 1
        self._chars[sla] += request.input_chars

    def sample(self, now: float) -> ArrivalMix:
        """Fold the tallies in and return the smoothed mix (the planner's loop only)."""
        tau = self._smoothing_s
        step = max(0.0, now - self._last)
        decay, decay_slow = math.exp(-step / tau), math.exp(-step / (2 * tau))
        # The tallies arrived over the last ``step`` seconds, not all at its end: each
        # weighs its mean decay over the step, as the window below assumes (counting them
        # whole overstated a steady rate by about step / (2 tau): 8% at 10 s and 60 s).
        weight, weight_slow = _mean_decay(step, tau), _mean_decay(step, 2 * tau)
        for sla in SlaClass:
            count, chars = self._counts[sla], self._chars[sla]
            self._counts[sla] = self._chars[sla] = 0
            audio = audio_seconds_for(chars // count) * count if count else 0.0
            self._decayed[sla] = self._decayed[sla] * decay + count
            self._decayed_rate[sla] = self._decayed_rate[sla] * decay + count * weight
            self._decayed_slow[sla] = self._decayed_slow[sla] * decay_slow + count * weight_slow
            self._decayed_audio[sla] = self._decayed_audio[sla] * decay + audio
        self._last = now
        # A sum decaying with time constant tau over a history of length t holds
        # tau x (1 - e^(-t/tau)) seconds' worth of arrivals: the rate's denominator.
        elapsed = max(0.0, now - self._started)
        window = tau * (1.0 - math.exp(-elapsed / tau))
        window_slow = 2 * tau * (1.0 - math.exp(-elapsed / (2 * tau)))
        classes = {}
        for sla in SlaClass:
            count = self._decayed[sla]
            rate = self._decayed_rate[sla] / window if window > 0 else 0.0
            trend = 0.0
            age, age_slow = _mean_age(tau, elapsed), _mean_age(2 * tau, elapsed)
            if self._forecast_s > 0 and age_slow - age >= tau / 4:  # too short a history: no slope yet
                trend = (rate - self._decayed_slow[sla] / window_slow) / (age_slow - age)
                rate = max(0.0, rate + trend * (age + self._forecast_s))
            audio_s = self._decayed_audio[sla] / count if count > 0 else 0.0
            classes[sla] = ClassArrivals(rate, audio_s, count, trend)
        return ArrivalMix(classes, window)


def _mean_decay(step: float, tau: float) -> float:
    """The mean of e^(-age / tau) over arrivals spread evenly across the last ``step`` seconds."""
    if step <= 0:
        return 1.0
    return -math.expm1(-step / tau) * tau / step


def _mean_age(tau: float, history_s: float) -> float:
    """The mean age of what an exponential average (time constant ``tau``) over ``history_s``
    seconds weighs: how far it lags a ramp (``tau`` once the history is long)."""
    if history_s <= 0:
        return 0.0
    x = history_s / tau
    if x > 50:
        return tau
    return tau - history_s * math.exp(-x) / -math.expm1(-x)
