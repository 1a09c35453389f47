"""The planner's math on synthetic curves and arrival mixes."""

from __future__ import annotations

from gateway.config import PlannerConfig
from gateway.planner.arrivals import ArrivalMeter, ArrivalMix, ClassArrivals
from gateway.planner.planner import FleetPlanner, size_fleet
from gateway.routing.performance import CurveSnapshot
from gateway.types import PoolName, SlaClass
from gateway.types.curve import Curve
from gateway.types.labels import PlanBound
from gateway.types.view import RequestInfo

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT
FRAMES_PER_S = 25


def curve(rtfs: list[float], ttfp_s: float = 0.2) -> Curve:
    return Curve(tuple(r / FRAMES_PER_S for r in rtfs), tuple(ttfp_s for _ in rtfs))


# Low-latency: fast, 8 streams at most. High-throughput: slower per stream, 32 streams.
LL_CURVE = curve([0.2 + 0.02 * n for n in range(8)])  # 0.20 .. 0.34
HT_CURVE = curve([0.35 + 0.015 * n for n in range(32)])  # 0.35 .. 0.815
CURVES = {LL: LL_CURVE, HT: HT_CURVE}


def mix(latency: float = 0.0, balanced: float = 0.0, throughput: float = 0.0, audio_s: float = 10.0) -> ArrivalMix:
    rates = {SlaClass.LATENCY: latency, SlaClass.BALANCED: balanced, SlaClass.THROUGHPUT: throughput}
    return ArrivalMix({sla: ClassArrivals(rate, audio_s, rate * 300) for sla, rate in rates.items()}, 300.0)


def config(**overrides: object) -> PlannerConfig:
    document = {
        "target_utilisation": 1.0,
        "objectives": {"latency": {"ttfp_s": 0.5, "rtf": 0.3}, "balanced": {"rtf": 0.9}, "throughput": {"rtf": 1.0}},
        **overrides,
    }
    return PlannerConfig.model_validate(document)


def test_latency_traffic_needs_low_latency_workers_bound_by_its_rtf() -> None:
    # latency rtf 0.3: a low-latency worker carries 6 streams (rtf 0.30); one request holds
    # ~0.2 + 10 x 0.3 = 3.2 s, so 2 req/s is 6.4 streams on average: two workers would hold
    # the average, but `latency` cannot queue and 1% of the time 13 or more are in flight
    # at once (Poisson): three workers (18 streams).
    sizing = size_fleet(config(), CURVES, mix(latency=2.0))
    assert sizing.feasible
    assert sizing.workers == {LL: 3, HT: 0}
    assert sizing.bound_by == {LL: PlanBound.LATENCY_RTF, HT: PlanBound.MINIMUM}
    assert 0 < sizing.margin < 1


def test_latency_bursts_must_fit_the_low_latency_pool() -> None:
    from gateway.planner.sizing import Demand, MixSizer, Objective

    objectives = {sla: Objective(o.rtf, o.ttfp_s) for sla, o in config().objectives.items()}
    # 1 req/s holds 3.2 streams on average (one worker's 6 would do) and 8 at its 99th
    # percentile: one worker is not enough, two are.
    sizer = MixSizer(CURVES, objectives, {SlaClass.LATENCY: Demand(1.0, 10.0)}, 1.0)
    assert not sizer.feasible({LL: 1, HT: 0}) and sizer.feasible({LL: 2, HT: 0})


def test_latency_stays_on_low_latency_unless_the_operator_allows_otherwise() -> None:
    # latency rtf 0.5: an idle high-throughput worker (0.35) meets it too.
    lenient = {"latency": {"ttfp_s": 0.5, "rtf": 0.5}, "balanced": {"rtf": 0.9}, "throughput": {"rtf": 1.0}}
    traffic = mix(latency=0.05, throughput=5.0)
    kept = size_fleet(config(objectives=lenient), CURVES, traffic)
    assert kept.workers[LL] >= 1
    assert not any(c.feasible for c in kept.candidates if c.workers[LL] == 0)
    allowed = size_fleet(config(objectives=lenient, latency_on_high_throughput=True), CURVES, traffic)
    assert any(c.feasible for c in allowed.candidates if c.workers[LL] == 0)
    # With no low-latency pool at all, `latency` goes where it can.
    alone = size_fleet(config(objectives=lenient), {HT: HT_CURVE}, traffic)
    assert alone.feasible and alone.workers[HT] >= 1


def test_among_equal_mixes_the_one_already_asked_for_stays() -> None:
    fresh = size_fleet(config(), CURVES, mix(balanced=0.2))
    assert fresh.workers == {LL: 1, HT: 0}
    kept = size_fleet(config(), CURVES, mix(balanced=0.2), previous={LL: 0, HT: 1})
    assert kept.workers == {LL: 0, HT: 1} and "already asked for" in kept.why
    # Not when it no longer fits, nor when fewer workers do.
    assert size_fleet(config(), CURVES, mix(balanced=0.2), previous={LL: 1, HT: 1}).workers == {LL: 1, HT: 0}


def test_growing_the_fleet_adds_to_the_last_mix_rather_than_replacing_it() -> None:
    # Two workers needed; 2 LL serves today's traffic fastest, but from 1 HT the plan adds
    # one low-latency worker (1 + 1) rather than two (and drops the HT): a pool-by-pool
    # autoscaler would otherwise hold 2 + 1 until its stabilisation window passed.
    traffic = mix(balanced=2.0, throughput=2.0)
    assert size_fleet(config(), CURVES, traffic).workers == {LL: 2, HT: 0}
    grown = size_fleet(config(), CURVES, traffic, previous={LL: 0, HT: 1})
    assert grown.workers == {LL: 1, HT: 1} and "adds the fewest workers" in grown.why


def test_heavy_throughput_traffic_goes_to_high_throughput_workers_up_to_their_max_load() -> None:
    # throughput rtf 1.0 lets a high-throughput worker run all 32 streams (rtf 0.815):
    # 5 req/s holds ~42 streams there, more than one worker; a low-latency one takes 8 of
    # them faster, so one of each beats two high-throughput ones on a tie.
    sizing = size_fleet(config(), CURVES, mix(throughput=5.0))
    assert sizing.workers == {LL: 1, HT: 1}
    assert sizing.bound_by[HT] is PlanBound.MAX_LOAD
    [chosen] = [c for c in sizing.candidates if c.workers == sizing.workers]
    assert chosen.placement[SlaClass.THROUGHPUT][HT] > 0.5


def test_light_balanced_traffic_prefers_the_faster_profile_on_a_tie() -> None:
    # One worker of either profile would do; the low-latency one serves it faster.
    sizing = size_fleet(config(), CURVES, mix(balanced=0.2))
    assert sizing.workers == {LL: 1, HT: 0}
    assert "serves today's traffic fastest" in sizing.why
    tried = {(c.workers[LL], c.workers[HT]) for c in sizing.candidates if c.feasible}
    assert (0, 1) in tried and (1, 0) in tried


def test_more_traffic_never_asks_for_fewer_workers() -> None:
    totals = [sum(size_fleet(config(), CURVES, mix(latency=r / 4, balanced=r / 2, throughput=r / 4)).workers.values())
              for r in (0.5, 1, 2, 4, 8)]  # fmt: skip
    assert totals == sorted(totals) and totals[-1] > totals[0]


def test_pool_minimums_and_maximums_hold() -> None:
    bounded = config(pools={"low_latency": {"min": 1, "max": 4}, "high_throughput": {"min": 1, "max": 2}})
    light = size_fleet(bounded, CURVES, mix(throughput=0.1))
    assert light.workers == {LL: 1, HT: 1}
    assert light.bound_by == {LL: PlanBound.MINIMUM, HT: PlanBound.MINIMUM}
    # More than the maximums can carry: the maximums, and it says it misses.
    flood = size_fleet(bounded, CURVES, mix(latency=20.0, throughput=50.0))
    assert not flood.feasible
    assert flood.workers == {LL: 4, HT: 2}
    assert flood.bound_by == {LL: PlanBound.MAXIMUM, HT: PlanBound.MAXIMUM}
    assert flood.margin < 0


def test_utilisation_leaves_headroom() -> None:
    full = size_fleet(config(), CURVES, mix(throughput=20.0))
    headroom = size_fleet(config(target_utilisation=0.5), CURVES, mix(throughput=20.0))
    assert sum(headroom.workers.values()) > sum(full.workers.values())


def test_latency_pool_takes_the_split_classes_to_its_operating_load_but_keeps_burst_headroom() -> None:
    from gateway.planner.sizing import Demand, MixSizer, Objective

    objectives = {sla: Objective(o.rtf, o.ttfp_s) for sla, o in config().objectives.items()}
    # A low-latency worker carrying `latency` runs 5 streams (latency ttfp and rtf); at
    # utilisation 0.5 a request holds ~0.2 + 10 x 0.22 = 2.4 s there, ~6 s on a
    # high-throughput worker (16 streams planned). `balanced` may fill the low-latency spare
    # up to the full 5 streams (the routing spills the rest to high-throughput, whose
    # headroom takes its bursts): 2.0 req/s there, 2.5 req/s (15 streams) on
    # high-throughput. Filled only to half (2.5 streams) it would leave 3.5 req/s (21 streams).
    demand = {SlaClass.LATENCY: Demand(0.05, 10.0), SlaClass.BALANCED: Demand(4.5, 10.0)}
    assert MixSizer(CURVES, objectives, demand, 0.5).feasible({LL: 1, HT: 1})
    # `latency`'s own bursts still fit within the utilisation: at 0.5 req/s (1.2 streams on
    # average, 4 at its 99th percentile) one worker's 2.5 are not enough, two workers' 5 are.
    bursty = MixSizer(CURVES, objectives, {**demand, SlaClass.LATENCY: Demand(0.5, 10.0)}, 0.5)
    assert not bursty.feasible({LL: 1, HT: 1}) and bursty.feasible({LL: 2, HT: 1})


def test_an_unconfigured_pool_gets_no_workers() -> None:
    sizing = size_fleet(config(), {HT: HT_CURVE}, mix(balanced=1.0))
    assert sizing.workers[LL] == 0 and sizing.workers[HT] >= 1


def test_arrivals_are_smoothed_per_class_with_their_lengths() -> None:
    meter = ArrivalMeter(smoothing_s=100.0, now=0.0)
    for _ in range(50):
        meter.record(RequestInfo(SlaClass.LATENCY, None, 150))  # 10 s of audio each
    sampled = meter.sample(10.0)
    latency = sampled.classes[SlaClass.LATENCY]
    assert latency.requests == 50 and abs(latency.audio_s - 10.0) < 1e-9
    # 50 requests in the first 10 s: 5 per second (the tallies weigh as spread over the step,
    # so a steady rate reads as itself, not the step's count over the smoothing window).
    assert abs(latency.rate - 5.0) < 1e-9 and 9 < sampled.window_s < 10
    assert sampled.classes[SlaClass.BALANCED].rate == 0.0
    later = meter.sample(110.0)  # nothing new: the count fades (e^-1)
    assert 18 < later.classes[SlaClass.LATENCY].requests < 19


def _ramp(meter: ArrivalMeter, until_s: int, rate: object) -> None:
    """Whole requests each second at ``rate(t)`` per second (the fractions carried over)."""
    owed = 0.0
    for t in range(until_s):
        owed += rate(t)  # type: ignore[operator]
        while owed >= 1:
            meter.record(RequestInfo(SlaClass.BALANCED, None, 150))
            owed -= 1
        meter.sample(float(t + 1))


def test_the_forecast_follows_a_ramp_ahead_where_the_average_lags() -> None:
    def ramp(t: float) -> float:
        return 2.0 + 0.01 * t

    lagging, ahead = ArrivalMeter(60.0, 0.0), ArrivalMeter(60.0, 0.0, forecast_s=60.0)
    _ramp(lagging, 1000, ramp)
    _ramp(ahead, 1000, ramp)
    now = 1000.0
    smoothed = lagging.sample(now).classes[SlaClass.BALANCED]
    forecast = ahead.sample(now).classes[SlaClass.BALANCED]
    assert abs(smoothed.rate - ramp(now - 60)) < 0.3 and smoothed.trend == 0.0  # a time constant behind
    assert abs(forecast.rate - ramp(now + 60)) < 0.3  # a provisioning delay ahead
    assert abs(forecast.trend - 0.01) < 0.002


def test_a_steady_rate_forecasts_itself() -> None:
    meter = ArrivalMeter(60.0, 0.0, forecast_s=60.0)
    _ramp(meter, 1000, lambda t: 3.0)
    steady = meter.sample(1000.0).classes[SlaClass.BALANCED]
    assert abs(steady.rate - 3.0) < 0.1 and abs(steady.trend) < 1e-3


def test_a_steady_rate_reads_as_itself_whatever_the_sampling_interval() -> None:
    # Tallies folded every 10 s at a 60 s time constant: counted whole at the end of each
    # step they read ~8% high (step / 2 tau); weighed over the step they read the rate.
    for step in (1, 10, 30):
        meter = ArrivalMeter(60.0, 0.0)
        for t in range(step, 1200 + step, step):
            for _ in range(3 * step):
                meter.record(RequestInfo(SlaClass.BALANCED, None, 150))
            sampled = meter.sample(float(t))
        assert abs(sampled.classes[SlaClass.BALANCED].rate - 3.0) < 0.01, step


def test_thin_traffic_changes_nothing_and_says_so() -> None:
    now = [0.0]
    planner = FleetPlanner(config(min_requests=10, smoothing_s=60.0), lambda: CurveSnapshot.of({}, CURVES), lambda: now[0])
    for _ in range(3):
        planner.record_arrival(RequestInfo(SlaClass.BALANCED, None, 150))
    now[0] = 5.0
    thin = planner.plan()
    assert not thin.judged and "too little traffic" in thin.status
    assert planner.desired_workers() is None and thin.sizing is None
    for _ in range(40):
        planner.record_arrival(RequestInfo(SlaClass.THROUGHPUT, None, 150))
    now[0] = 10.0
    judged = planner.plan()
    desired = planner.desired_workers()
    assert judged.judged and desired == {"low_latency": 1, "high_throughput": 1}
    # A quiet spell: no judgement, the last mix stays published, the planner says so.
    now[0] = 1000.0
    quiet = planner.plan()
    assert not quiet.judged and planner.desired_workers() is None
    assert quiet.sizing is judged.sizing and quiet.judged_at == 10.0
    described = planner.describe()
    assert described["judged"] is False and described["plan"]["workers"] == desired
    assert described["plan"]["age_s"] == 990.0


def test_the_planner_section_is_validated() -> None:
    import pytest

    from gateway.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="planner.pools.low_latency"):
        load_config(overrides={"planner": {"pools": {"low_latency": {"min": 3, "max": 2}}}})
    with pytest.raises(ConfigError, match="planner.objectives"):
        load_config(overrides={"planner": {"objectives": {"interactive": {"rtf": 0.5}}}})
    partial = load_config(overrides={"planner": {"objectives": {"throughput": {"rtf": 1.2}}, "pools": {"high_throughput": {"max": 4}}}})
    assert partial.planner.objectives[SlaClass.THROUGHPUT].rtf == 1.2
    assert partial.planner.objectives[SlaClass.LATENCY] == PlannerConfig().objectives[SlaClass.LATENCY]
    assert partial.planner.bounds(HT).max == 4 and partial.planner.bounds(LL).max == 16


def test_a_fixed_number_of_gpus_gets_the_split_that_falls_least_short() -> None:
    # Throughput traffic two high-throughput workers cannot carry within its objective:
    # the planner asks for more of both, but two GPUs can only change profile, so they
    # get the split of two that absorbs the most of it: both high-throughput.
    now = [0.0]
    planner = FleetPlanner(config(min_requests=1, smoothing_s=1.0), lambda: CurveSnapshot.of({}, CURVES), lambda: now[0])
    assert planner.mix_for({"low_latency": 1, "high_throughput": 1}) is None  # nothing judged yet
    for _ in range(400):
        planner.record_arrival(RequestInfo(SlaClass.THROUGHPUT, None, 3000))
    now[0] = 1.0
    plan = planner.plan()
    assert plan.sizing is not None and sum(plan.sizing.workers.values()) > 2
    assert planner.mix_for({"low_latency": 1, "high_throughput": 1}) == {"low_latency": 0, "high_throughput": 2}
    assert planner.mix_for({"low_latency": 0, "high_throughput": 2}) == {"low_latency": 0, "high_throughput": 2}


def test_a_fixed_fleet_runs_the_split_that_serves_todays_traffic_fastest() -> None:
    # Light traffic one worker carries: the planner (sizing for an autoscaler) asks for the
    # fewest workers; two GPUs are best used as low-latency, which runs it faster.
    now = [0.0]
    planner = FleetPlanner(config(min_requests=10, smoothing_s=60.0), lambda: CurveSnapshot.of({}, CURVES), lambda: now[0])
    for _ in range(40):
        planner.record_arrival(RequestInfo(SlaClass.THROUGHPUT, None, 150))
    now[0] = 10.0
    planner.plan()
    moved = planner.mix_for({"low_latency": 0, "high_throughput": 2})
    assert moved is not None and moved["low_latency"] >= 1 and sum(moved.values()) == 2


def test_a_split_only_slightly_better_does_not_move_a_gpu() -> None:
    from gateway.planner.sizing import MARGIN_HYSTERESIS, SERVICE_RTF_HYSTERESIS, Bounds, Demand, MixSizer, Objective

    objectives = {sla: Objective(o.rtf, o.ttfp_s) for sla, o in config().objectives.items()}
    bounds = {LL: Bounds(0, 4), HT: Bounds(0, 4)}
    light = MixSizer(CURVES, objectives, {SlaClass.BALANCED: Demand(0.2, 10.0)}, 1.0)
    fastest = light.best_of(2, bounds)
    assert fastest is not None and fastest.feasible and fastest.total == 2
    for n in range(3):
        other = light.candidate({LL: n, HT: 2 - n})
        chosen = light.best_of(2, bounds, keep={LL: n, HT: 2 - n})
        assert chosen is not None
        if other.feasible and fastest.service_rtf > other.service_rtf * (1 - SERVICE_RTF_HYSTERESIS):
            assert chosen.workers == other.workers  # not clearly better: the running split stays
        else:
            assert chosen.workers == fastest.workers
    heavy = MixSizer(CURVES, objectives, {SlaClass.THROUGHPUT: Demand(50.0, 10.0)}, 1.0)
    short = heavy.best_of(2, bounds)
    assert short is not None and not short.feasible
    assert short.margin == max(heavy.candidate({LL: n, HT: 2 - n}).margin for n in range(3))
    for n in range(3):
        running = heavy.candidate({LL: n, HT: 2 - n})
        chosen = heavy.best_of(2, bounds, keep={LL: n, HT: 2 - n})
        assert chosen is not None
        expected = running if 1 + short.margin < (1 + running.margin) * (1 + MARGIN_HYSTERESIS) else short
        assert chosen.workers == expected.workers
    every = heavy.best_of(8, bounds)
    assert every is not None and every.workers == {LL: 4, HT: 4}
    assert heavy.best_of(9, bounds) is None  # no split of 9 fits the bounds
