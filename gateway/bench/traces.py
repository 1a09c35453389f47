"""Open-loop arrival traces: when each request is sent, and with which SLA class.

Traces are generated up front from a seed, so two configurations benchmarked with the
same arguments receive exactly the same requests at exactly the same offsets.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gateway.types import SlaClass


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float  # offset from the start of the trace
    sla_class: SlaClass | None  # None = send no x-sla-class header


def poisson(rate: float, duration_s: float, seed: int, sla_class: SlaClass | None = None) -> list[Arrival]:
    """Poisson arrivals (exponential gaps) at ``rate`` per second for ``duration_s``."""
    if rate <= 0 or duration_s <= 0:
        raise ValueError("rate and duration must be positive")
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    at = rng.expovariate(rate)
    while at < duration_s:
        arrivals.append(Arrival(at, sla_class))
        at += rng.expovariate(rate)
    return arrivals


def bursty(
    duration_s: float,
    seed: int,
    latency_rate: float,
    burst_rate: float,
    on_s: float,
    off_s: float,
) -> list[Arrival]:
    """Interactive traffic with batch bursts on top, merged in time order.

    ``latency`` requests arrive as a steady Poisson stream (people talking to an
    assistant); ``throughput`` requests arrive only during on-periods of an on/off cycle,
    at ``burst_rate`` (a batch job narrating documents), starting with an off-period so
    the first burst lands on an already busy fleet. The mix is what the adaptive policy
    exists for: bursts must not ruin the interactive requests' time to first packet.
    """
    if duration_s <= 0 or on_s <= 0 or off_s < 0 or latency_rate < 0 or burst_rate < 0:
        raise ValueError("durations and rates must be positive")
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    if latency_rate > 0:
        at = rng.expovariate(latency_rate)
        while at < duration_s:
            arrivals.append(Arrival(at, SlaClass.LATENCY))
            at += rng.expovariate(latency_rate)
    if burst_rate > 0:
        period_start = off_s
        while period_start < duration_s:
            period_end = min(period_start + on_s, duration_s)
            at = period_start + rng.expovariate(burst_rate)
            while at < period_end:
                arrivals.append(Arrival(at, SlaClass.THROUGHPUT))
                at += rng.expovariate(burst_rate)
            period_start += on_s + off_s
    arrivals.sort(key=lambda arrival: arrival.at_s)
    return arrivals
