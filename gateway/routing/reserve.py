"""The latency reserve: places on low-latency workers the other classes leave to `latency`.

A fixed reserve costs `balanced` throughput whenever no `latency` traffic comes (on one
low-latency + one high-throughput worker, two of sixteen places), and none costs `latency`
its time to first packet in a burst. So the reserve follows the `latency` traffic the
gateway actually sees:

- ``LatencyDemand`` counts `latency` arrivals (admission tells it, O(1) per arrival) with
  their audio length, as exponentially decaying sums: a smoothed arrival rate and mean
  clip length that forget with ``DEMAND_HALF_LIFE_S``.
- Off the read path, the performance model's refit turns them into places: with arrivals
  at rate ``r`` each holding a low-latency place for ``S`` seconds (time to first packet
  plus the clip at latency-grade RTF, from the low-latency pool's learned curve), the
  number of `latency` requests in flight at once is Poisson with mean ``r x S`` (Erlang's
  offered load; an M/G/inf system). The reserve is that count's ``RESERVE_QUANTILE``
  quantile, spread over the low-latency workers, published in the curve snapshot.
- A decision only reads the published number, bounded by the operator's
  ``reserve_for_latency`` (the most it may be); ``adaptive_latency_reserve: false`` pins it
  at ``reserve_for_latency`` whatever the traffic.

The filter that applies it is ``filters.LeavesLatencyReserve``; the classes that leave it
are ``classes.balanced`` and ``classes.throughput``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gateway.config import RoutingThresholds
from gateway.types import PoolName
from gateway.types.curve import Curve, audio_seconds_for
from gateway.types.view import LoadView, WorkerLoad

LL = PoolName.LOW_LATENCY

# How fast the demand estimate forgets: long enough to hold the reserve through the quiet
# seconds between `latency` arrivals, short enough to give the places back a few minutes
# after `latency` traffic stops.
DEMAND_HALF_LIFE_S = 30.0
# Enough places for the `latency` requests in flight at once this share of the time.
RESERVE_QUANTILE = 0.99
# A latency-grade stream runs at most this much slower than an idle low-latency one: the
# `latency` class's default RTF ceiling (classes/latency.py) and the service time the
# adaptive reserve sizes for.
LATENCY_RTF_MARGIN = 1.4
_LN2 = math.log(2.0)


class LatencyDemand:
    """The `latency` traffic seen lately: decaying sums of arrivals and their audio seconds."""

    __slots__ = ("half_life_s", "_count", "_audio_s", "_at")

    def __init__(self, half_life_s: float = DEMAND_HALF_LIFE_S) -> None:
        self.half_life_s = half_life_s
        self._count = 0.0
        self._audio_s = 0.0
        self._at = 0.0

    def on_arrival(self, now: float, input_chars: int) -> None:
        """One `latency` request arrived (counted once, however long it then queues)."""
        keep = self._decay(now)
        self._count = self._count * keep + 1.0
        self._audio_s = self._audio_s * keep + audio_seconds_for(input_chars)
        self._at = now

    def rate(self, now: float) -> float:
        """Smoothed arrivals per second (an exponentially weighted count over the half-life)."""
        return self._count * self._decay(now) * _LN2 / self.half_life_s

    def mean_audio_s(self) -> float:
        return self._audio_s / self._count if self._count > 0 else 0.0

    def places_needed(self, now: float, ll_curve: Curve | None, ll_workers: int) -> int:
        """Places per low-latency worker that hold the `latency` requests in flight at once
        ``RESERVE_QUANTILE`` of the time (0 with no `latency` traffic or no low-latency worker)."""
        if ll_curve is None or ll_workers <= 0 or self._count <= 0:
            return 0
        service_s = ll_curve.ttfp(1) + self.mean_audio_s() * ll_curve.rtf(1) * LATENCY_RTF_MARGIN
        in_flight = poisson_quantile(self.rate(now) * service_s, RESERVE_QUANTILE)
        return -(-in_flight // ll_workers)

    def _decay(self, now: float) -> float:
        return 0.5 ** (max(0.0, now - self._at) / self.half_life_s)


def poisson_quantile(mean: float, quantile: float) -> int:
    """The smallest ``k`` with P(N <= k) >= ``quantile`` for N ~ Poisson(``mean``)."""
    if mean <= 0:
        return 0
    if mean > 50:  # the normal approximation is close there, and exp(-mean) underflows later
        z = _normal_quantile(quantile)
        return math.ceil(mean + z * math.sqrt(mean) - 0.5)
    term = math.exp(-mean)
    cdf, k = term, 0
    while cdf < quantile:
        k += 1
        term *= mean / k
        cdf += term
    return k


def _normal_quantile(quantile: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(quantile)


def latency_reserve(thresholds: RoutingThresholds, view: LoadView, fleet: Sequence[WorkerLoad]) -> int:
    """Places per low-latency worker the other classes leave to `latency` right now.

    None when low-latency is all there is (then every class must use it); else the
    published demand (``LoadView.latency_places``) up to ``reserve_for_latency``, or
    ``reserve_for_latency`` itself when pinned (or when nothing estimates the demand).
    """
    if not any(w.pool is not LL for w in fleet):
        return 0
    ceiling = thresholds.reserve_for_latency
    needed = view.latency_places
    if not thresholds.adaptive_latency_reserve or needed is None:
        return ceiling
    return needed if needed < ceiling else ceiling


def static_latency_reserve(thresholds: RoutingThresholds, view: LoadView) -> int:
    """The `rules` policy's reserve: ``reserve_for_latency`` places on every routable
    low-latency worker, pool-wide, that `throughput` requests must leave free."""
    return thresholds.reserve_for_latency * len(view.routable(PoolName.LOW_LATENCY))
