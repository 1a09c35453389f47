"""Arrival traces: deterministic per seed, shaped as documented."""

from __future__ import annotations

import pytest

from gateway.bench.workload import TEXTS, bursty, poisson, text_order
from gateway.types import SlaClass


def test_poisson_is_deterministic_per_seed_and_varies_across_seeds() -> None:
    assert poisson(5.0, 60.0, seed=1) == poisson(5.0, 60.0, seed=1)
    assert poisson(5.0, 60.0, seed=1) != poisson(5.0, 60.0, seed=2)


def test_poisson_rate_and_bounds() -> None:
    arrivals = poisson(10.0, 200.0, seed=3, sla_class=SlaClass.BALANCED)
    assert 1800 < len(arrivals) < 2200  # 2000 expected; +-10% is > 4 sigma
    offsets = [a.at_s for a in arrivals]
    assert offsets == sorted(offsets)
    assert 0 < offsets[0] and offsets[-1] < 200.0
    assert {a.sla_class for a in arrivals} == {SlaClass.BALANCED}


def test_poisson_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        poisson(0.0, 10.0, seed=0)


def test_bursty_is_deterministic_per_seed() -> None:
    args = dict(duration_s=120.0, latency_rate=1.0, burst_rate=8.0, on_s=15.0, off_s=25.0)
    assert bursty(seed=7, **args) == bursty(seed=7, **args)
    assert bursty(seed=7, **args) != bursty(seed=8, **args)


def test_bursty_throughput_only_in_on_periods_latency_throughout() -> None:
    arrivals = bursty(duration_s=120.0, seed=5, latency_rate=2.0, burst_rate=10.0, on_s=10.0, off_s=30.0)
    offsets = [a.at_s for a in arrivals]
    assert offsets == sorted(offsets)
    # Cycle of 40 s starting with 30 s off: bursts are in [30, 40) and [70, 80) and [110, 120).
    for arrival in arrivals:
        if arrival.sla_class is SlaClass.THROUGHPUT:
            assert (arrival.at_s - 30.0) % 40.0 < 10.0
    latency = [a.at_s for a in arrivals if a.sla_class is SlaClass.LATENCY]
    assert min(latency) < 30.0 and max(latency) > 90.0  # spread over the whole trace
    throughput = [a for a in arrivals if a.sla_class is SlaClass.THROUGHPUT]
    assert 200 < len(throughput) < 400  # 3 bursts x 10 s x 10/s = 300 expected


def test_text_order_is_seeded_and_covers_the_set_evenly() -> None:
    assert text_order(100, seed=1) == text_order(100, seed=1)
    assert text_order(100, seed=1) != text_order(100, seed=2)
    first_round = text_order(len(TEXTS), seed=4)
    assert sorted(first_round) == sorted(TEXTS)  # each text once before any repeats


def test_text_set_is_ours_and_spread_in_length() -> None:
    assert 38 <= len(TEXTS) <= 45
    assert len(set(TEXTS)) == len(TEXTS)
    lengths = sorted(len(t) for t in TEXTS)
    assert lengths[0] < 40 and lengths[-1] > 500  # a few words up to over half a minute of audio
