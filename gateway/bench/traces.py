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
    voice: int | None = None  # voice clone traces: which of the trace's voices (an index)


def voice_clone(
    rate: float, duration_s: float, seed: int, voices: int, sla_class: SlaClass | None = SlaClass.LATENCY
) -> list[Arrival]:
    """Poisson arrivals, each cloning one of ``voices`` uploaded voices picked uniformly at
    random (each voice's requests spread over the whole trace, as a voice's users would)."""
    if voices <= 0:
        raise ValueError("voices must be positive")
    rng = random.Random(seed + 7)
    return [Arrival(a.at_s, sla_class, rng.randrange(voices)) for a in poisson(rate, duration_s, seed)]


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


# Default class mix of the ramp: some interactive, mostly ordinary, some batch work.
RAMP_MIX: tuple[tuple[SlaClass, float], ...] = (
    (SlaClass.LATENCY, 0.2), (SlaClass.BALANCED, 0.5), (SlaClass.THROUGHPUT, 0.3),
)  # fmt: skip


def ramp(
    duration_s: float,
    seed: int,
    start_rate: float,
    peak_rate: float,
    mix: tuple[tuple[SlaClass, float], ...] = RAMP_MIX,
) -> list[Arrival]:
    """Load that rises linearly from ``start_rate`` to ``peak_rate`` and back, mixed classes.

    The first half climbs from about one request at a time to past what the fleet can
    serve, the second half comes back down: a policy must follow the load both ways
    without oscillating. Poisson arrivals with a time-varying rate (thinning).
    """
    if duration_s <= 0 or start_rate < 0 or peak_rate <= 0 or peak_rate < start_rate:
        raise ValueError("duration and peak rate must be positive, start rate <= peak rate")
    total = sum(weight for _, weight in mix)
    if total <= 0:
        raise ValueError("the class mix needs a positive weight")
    rng = random.Random(seed)
    half = duration_s / 2

    def rate_at(t: float) -> float:
        climb = t / half if t <= half else (duration_s - t) / half
        return start_rate + (peak_rate - start_rate) * climb

    arrivals: list[Arrival] = []
    at = 0.0
    while True:
        at += rng.expovariate(peak_rate)
        if at >= duration_s:
            break
        if rng.random() * peak_rate <= rate_at(at):
            pick = rng.random() * total
            for sla_class, weight in mix:
                pick -= weight
                if pick <= 0:
                    break
            arrivals.append(Arrival(at, sla_class))
    return arrivals
