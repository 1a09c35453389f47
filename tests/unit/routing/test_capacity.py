"""Derived limits and the latency queue budget."""

from __future__ import annotations

import pytest

from gateway.routing.capacity import balanced_threshold
from gateway.routing.reserve import static_latency_reserve as latency_reserve
from gateway.routing.classes.latency import queue_budget_s as latency_queue_budget_s
from gateway.types import PoolName
from tests.unit.routing.fakes import ht, ll, req, thresholds, view

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT


def test_balanced_threshold_defaults_to_routable_ll_capacity() -> None:
    fleet = view(ll("ll-a", slots=4), ll("ll-b", slots=6), ll("ll-c", routable=False), ht("ht-a"))
    assert balanced_threshold(thresholds(), fleet) == 10
    assert balanced_threshold(thresholds(balanced_threshold=3), fleet) == 3
    assert latency_reserve(thresholds(reserve_for_latency=2), fleet) == 4


@pytest.mark.parametrize(
    ("ttfp_ms", "knobs", "expect_s"),
    [
        (None, {}, 0.150),
        (None, {"latency_queue_budget_ms": 40}, 0.040),
        (800, {}, 0.400),
        (800, {"ttfp_budget_queue_fraction": 0.25}, 0.200),
        (0, {}, 0.0),
        (-5, {}, 0.0),
    ],
)
def test_latency_queue_budget(ttfp_ms: float | None, knobs: dict, expect_s: float) -> None:
    assert latency_queue_budget_s(req("latency", ttfp_ms=ttfp_ms), thresholds(**knobs)) == pytest.approx(expect_s)


def test_the_gateway_own_delay_comes_off_the_client_ttfp_budget() -> None:
    from dataclasses import replace

    request = replace(req("latency", ttfp_ms=800), gateway_delay_s=0.2)
    assert latency_queue_budget_s(request, thresholds()) == pytest.approx(0.300)  # (0.8 - 0.2) x 0.5
    assert latency_queue_budget_s(replace(request, gateway_delay_s=2.0), thresholds()) == 0.0
