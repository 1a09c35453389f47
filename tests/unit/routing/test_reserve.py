"""The latency reserve: sized from observed `latency` traffic, published by the refit, bounded by the knob."""

from __future__ import annotations

import math

import pytest

from gateway.config import AdmissionConfig, RoutingConfig
from gateway.worker.profile import load_deploy_profile
from gateway.routing.adaptive import AdaptivePolicy
from gateway.routing import core as routing_core
from gateway.routing.prior import prior_curve
from gateway.routing.reserve import DEMAND_HALF_LIFE_S, LatencyDemand, latency_reserve, poisson_quantile
from gateway.types import PoolName
from gateway.types import reasons as r
from gateway.types.curve import CHARS_PER_AUDIO_SECOND
from gateway.types.decision import Action
from gateway.types.view import LoadView, WorkerLoad
from tests.unit.routing.fakes import FakeClock, FakeFleet, req, thresholds

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT
LL_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_low_latency"))
HT_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_high_throughput"))
SIX_SECONDS = int(6 * CHARS_PER_AUDIO_SECOND)


def poisson_cdf(k: int, mean: float) -> float:
    return sum(math.exp(-mean) * mean**i / math.factorial(i) for i in range(k + 1))


@pytest.mark.parametrize("mean", [0.01, 0.05, 0.3, 1.0, 2.4, 10.0, 40.0])
def test_poisson_quantile_is_the_smallest_count_covering_the_quantile(mean: float) -> None:
    k = poisson_quantile(mean, 0.99)
    assert poisson_cdf(k, mean) >= 0.99
    assert k == 0 or poisson_cdf(k - 1, mean) < 0.99


def test_poisson_quantile_of_large_means_stays_close_and_never_hangs() -> None:
    assert poisson_quantile(0.0, 0.99) == 0
    assert poisson_quantile(60.0, 0.99) == pytest.approx(60 + 2.326 * math.sqrt(60), abs=2)
    assert poisson_quantile(1e6, 0.99) == pytest.approx(1e6 + 2.326 * 1e3, abs=2)


def arrivals(demand: LatencyDemand, clock: FakeClock, rate: float, seconds: float) -> None:
    for _ in range(int(rate * seconds)):
        clock.advance(1.0 / rate)
        demand.on_arrival(clock(), SIX_SECONDS)


def test_no_latency_traffic_needs_no_places() -> None:
    assert LatencyDemand().places_needed(0.0, LL_CURVE, 1) == 0


def test_steady_latency_traffic_needs_its_p99_in_flight_spread_over_low_latency_workers() -> None:
    clock, demand = FakeClock(), LatencyDemand()
    arrivals(demand, clock, rate=2.0, seconds=600)
    assert demand.rate(clock()) == pytest.approx(2.0, rel=0.05)
    assert demand.mean_audio_s() == pytest.approx(6.0, rel=0.01)
    service_s = LL_CURVE.ttfp(1) + 6.0 * LL_CURVE.rtf(1) * 1.4
    in_flight = poisson_quantile(demand.rate(clock()) * service_s, 0.99)
    assert in_flight >= 4
    assert demand.places_needed(clock(), LL_CURVE, 1) == in_flight
    assert demand.places_needed(clock(), LL_CURVE, 2) == math.ceil(in_flight / 2)
    assert demand.places_needed(clock(), None, 1) == 0  # no low-latency worker: nothing to keep


def test_the_first_arrival_raises_the_reserve_and_it_fades_once_traffic_stops() -> None:
    clock, demand = FakeClock(), LatencyDemand()
    demand.on_arrival(clock(), SIX_SECONDS)
    assert demand.places_needed(clock(), LL_CURVE, 1) >= 1
    arrivals(demand, clock, rate=1.0, seconds=120)
    busy = demand.places_needed(clock(), LL_CURVE, 1)
    clock.advance(2 * DEMAND_HALF_LIFE_S)
    assert 0 < demand.places_needed(clock(), LL_CURVE, 1) < busy
    clock.advance(20 * DEMAND_HALF_LIFE_S)
    assert demand.places_needed(clock(), LL_CURVE, 1) == 0


def fleet(ll_load: int = 0, ht_load: int = 0, places: int | None = None, ht_routable: bool = True) -> LoadView:
    return LoadView(
        (WorkerLoad("ll-a", LL, True, ll_load, None, 16, LL_CURVE), WorkerLoad("ht-a", HT, ht_routable, ht_load, None, 64, HT_CURVE)),
        places,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("places", "knobs", "expected"),
    [
        (0, {}, 0),  # no latency traffic seen: no reserve
        (1, {}, 1),
        (5, {}, 3),  # reserve_for_latency (3) is the most it may be
        (5, {"reserve_for_latency": 4}, 4),
        (0, {"adaptive_latency_reserve": False}, 3),  # pinned
        (None, {}, 3),  # nothing estimates the demand: the configured reserve
    ],
)
def test_the_reserve_is_the_published_demand_up_to_the_knob(places: int | None, knobs: dict, expected: int) -> None:
    view = fleet(places=places)
    assert latency_reserve(thresholds(**knobs), view, view.workers) == expected


def test_without_high_throughput_there_is_no_reserve_whatever_the_demand() -> None:
    view = fleet(places=5)
    only_ll = [w for w in view.workers if w.pool is LL]
    assert latency_reserve(thresholds(), view, only_ll) == 0


def test_balanced_fills_low_latency_to_its_cap_while_no_latency_traffic_comes() -> None:
    policy, knobs = AdaptivePolicy(), thresholds()
    quiet = policy.decide(req("balanced"), fleet(ll_load=14, ht_load=64, places=0), knobs)
    assert (quiet.action, quiet.pool) == (Action.ROUTE, LL)
    busy = policy.decide(req("balanced"), fleet(ll_load=14, ht_load=64, places=3), knobs)
    assert (busy.action, busy.reason) == (Action.WAIT, r.QUEUED_LL_RESERVED)
    assert policy.decide(req("latency"), fleet(ll_load=14, ht_load=64, places=3), knobs).action is Action.ROUTE


async def test_admission_counts_latency_arrivals_and_the_refit_publishes_the_reserve() -> None:
    """As the routing core is built everywhere (``routing.core.build``): one demand between
    admission and the performance model."""
    clock = FakeClock(0.0)
    workers = FakeFleet.of(WorkerLoad("ll-a", LL, True, 0, None, 16), WorkerLoad("ht-a", HT, True, 0, None, 64))
    core = routing_core.build(
        RoutingConfig(), AdmissionConfig(), workers.snapshot, workers.reserve, clock,
        priors={LL: LL_CURVE, HT: HT_CURVE}, any_routable=workers.any_routable, thresholds=thresholds,
    )  # fmt: skip
    performance, admission = core.performance, core.admission
    performance.track(workers.snapshot())
    assert core.snapshot().latency_places == 0  # from the start: no `latency` traffic, no reserve
    for _ in range(20):
        clock.advance(1.0)
        (await admission.admit(req("balanced"))).release()
    assert performance.refit().latency_places == 0  # balanced traffic reserves nothing
    for _ in range(20):
        clock.advance(1.0)
        (await admission.admit(req("latency"))).release()
    # Counted on arrival, published only by the refit: decisions read the last snapshot.
    assert performance.snapshot().latency_places == 0
    published = performance.refit().latency_places
    assert published is not None and published >= 1
    assert core.snapshot().latency_places == published
