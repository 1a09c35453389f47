"""The online performance model: converges, resists outliers, forgets, stays monotone."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import LearningSettings
from gateway.routing.performance import PerformanceModel
from gateway.types import PoolName
from gateway.types.codec import BYTES_PER_FRAME
from gateway.types.curve import Curve
from gateway.types.observations import PaceSample, StreamObservation, StreamOutcome
from gateway.upstream.pace import PaceMeter
from tests.unit.routing.fakes import scaled

PRIOR = Curve(
    step_s=tuple(0.010 + 0.0002 * n for n in range(16)),
    ttfp_s=tuple(0.180 + 0.002 * n for n in range(16)),
)


def truth_step(load: int) -> float:
    """A worker 1.6x slower than its prior, and more so under load."""
    return PRIOR.step(load) * (1.6 + 0.02 * load)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def model(**knobs: object) -> tuple[PerformanceModel, Clock]:
    clock = Clock()
    performance = PerformanceModel(LearningSettings(**knobs), clock=clock)  # type: ignore[arg-type]
    performance.add_worker("w", PRIOR)
    return performance, clock


def stream(load: int, step: float, ttfp: float | None = None, seconds: int = 8) -> StreamObservation:
    pace = tuple(PaceSample(load, 25, 25 * step) for _ in range(seconds))
    return StreamObservation("w", PoolName.LOW_LATENCY, load, ttfp, pace)


def refreshed(performance: PerformanceModel, clock: Clock) -> Curve:
    """The curve after the background refit's next pass."""
    clock.now += PerformanceModel.REFRESH_S
    performance.refit()
    curve = performance.curve("w")
    assert curve is not None
    return curve


def test_an_unobserved_worker_is_its_prior() -> None:
    performance, _ = model()
    assert performance.curve("w") == PRIOR


def test_converges_to_a_known_curve_within_a_few_dozen_requests() -> None:
    performance, clock = model()
    rng = random.Random(1)
    for _ in range(40):
        load = rng.randint(1, 16)
        noisy = truth_step(load) * rng.uniform(0.95, 1.05)
        performance.on_stream_done(stream(load, noisy, ttfp=PRIOR.ttfp(load) * 1.5))
        clock.now += 1.0
    curve = refreshed(performance, clock)
    for load in range(1, 17):
        assert math.isclose(curve.step(load), truth_step(load), rel_tol=0.08), load
        assert math.isclose(curve.ttfp(load), PRIOR.ttfp(load) * 1.5, rel_tol=0.1), load


def test_a_uniformly_slower_worker_is_learned_at_loads_it_never_ran() -> None:
    performance, clock = model()
    for _ in range(30):
        performance.on_stream_done(stream(2, PRIOR.step(2) * 3.0))
    curve = refreshed(performance, clock)
    assert curve.step(16) > PRIOR.step(16) * 2.5  # the overall correction carries over


def test_absurd_samples_and_spikes_do_not_poison_it() -> None:
    performance, clock = model()
    rng = random.Random(2)
    for index in range(200):
        load = rng.randint(1, 16)
        step = truth_step(load)
        if index % 10 == 0:
            step *= 50  # a stall: far off the prior, dropped
        elif index % 10 == 5:
            step *= 3  # a spike: clamped once the load has samples
        performance.on_stream_done(stream(load, step))
        clock.now += 0.5
    curve = refreshed(performance, clock)
    for load in range(1, 17):
        assert curve.step(load) < truth_step(load) * 1.25, load


def test_it_forgets_back_toward_the_prior() -> None:
    performance, clock = model(half_life_s=60.0)
    for _ in range(30):
        performance.on_stream_done(stream(4, PRIOR.step(4) * 2.0))
    learned = refreshed(performance, clock)
    assert learned.step(4) > PRIOR.step(4) * 1.8
    clock.now += 60.0 * 20  # twenty half-lives without a sample
    performance.on_stream_done(stream(4, PRIOR.step(4)))  # one fresh sample at the prior
    forgotten = refreshed(performance, clock)
    assert forgotten.step(4) < PRIOR.step(4) * 1.1


def test_reset_forgets_a_restarted_worker() -> None:
    performance, clock = model()
    for _ in range(30):
        performance.on_stream_done(stream(4, PRIOR.step(4) * 2.0))
    refreshed(performance, clock)
    performance.reset_worker("w")
    assert performance.curve("w") == PRIOR


def test_disabled_learning_keeps_the_prior() -> None:
    performance, clock = model(enabled=False)
    performance.on_stream_done(stream(4, PRIOR.step(4) * 2.0))
    assert refreshed(performance, clock) == PRIOR


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.floats(0.2, 6.0), st.floats(0.2, 6.0)), min_size=1, max_size=60))
def test_curves_stay_monotone_and_bounded(samples: list[tuple[int, float, float]]) -> None:
    performance, clock = model()
    for load, step_factor, ttfp_factor in samples:
        performance.on_stream_done(stream(load, PRIOR.step(load) * step_factor, PRIOR.ttfp(load) * ttfp_factor, seconds=2))
        clock.now += 0.1
    curve = refreshed(performance, clock)
    assert curve.max_load == PRIOR.max_load  # memory does not grow with samples
    assert all(a <= b + 1e-12 for a, b in zip(curve.step_s, curve.step_s[1:], strict=False))
    assert all(a <= b + 1e-12 for a, b in zip(curve.ttfp_s, curve.ttfp_s[1:], strict=False))
    assert all(PRIOR.step_s[0] / 8 <= s <= PRIOR.step_s[-1] * 8 for s in curve.step_s)


def test_unknown_workers_are_ignored() -> None:
    performance, clock = model()
    slow = stream(1, PRIOR.step(1) * 3.0, ttfp=0.9)
    for _ in range(20):
        performance.on_stream_done(StreamObservation("gone", PoolName.LOW_LATENCY, 1, slow.ttfp_s, slow.pace))
    assert refreshed(performance, clock) == PRIOR  # a known worker of the same pool learned nothing
    assert performance.curve("gone") is None


def test_only_completed_streams_teach_it() -> None:
    performance, clock = model()
    for outcome in (StreamOutcome.CUT, StreamOutcome.RETRIED, StreamOutcome.CLIENT_DISCONNECTED, StreamOutcome.ERROR):
        slow = stream(4, PRIOR.step(4) * 4.0, ttfp=2.0)
        performance.on_stream_done(StreamObservation("w", slow.pool, 4, 2.0, slow.pace, outcome))
    assert refreshed(performance, clock) == PRIOR
    assert performance.curve("gone") is None


def test_describe_shows_prior_and_learned_side_by_side() -> None:
    performance, _ = model()
    performance.on_stream_done(stream(4, PRIOR.step(4) * 2.0, ttfp=0.3))
    performance.refit()
    described = performance.describe("w")
    assert described is not None
    point = next(p for p in described["points"] if p["load"] == 4)  # type: ignore[index]
    assert point["rtf"] > point["prior_rtf"] and point["step_samples"] > 0


def test_pace_meter_measures_steps_whatever_the_read_sizes() -> None:
    step = 0.02  # seconds per decode step
    clock = Clock()
    meter = PaceMeter(clock, lambda: 3)
    clock.now = 0.25
    meter.add(BYTES_PER_FRAME)  # the 1-frame first chunk
    for _ in range(6):
        clock.now += 25 * step
        for part in (20000, 20000, 8000):  # one 48000-byte chunk split across three reads
            meter.add(part)
    assert meter.first_at == 0.25 and meter.bytes == BYTES_PER_FRAME + 6 * 48000
    assert meter.samples and all(s.load == 3 for s in meter.samples)
    frames = sum(s.frames for s in meter.samples)
    assert math.isclose(sum(s.seconds for s in meter.samples) / frames, step, rel_tol=0.05)
    observation = StreamObservation("w", PoolName.LOW_LATENCY, 3, 0.25, tuple(meter.samples))
    assert observation.observed_rtf is not None and math.isclose(observation.observed_rtf, 25 * step, rel_tol=0.05)


def curves_after_refit(performance: PerformanceModel, view) -> dict[str, Curve]:  # type: ignore[no-untyped-def]
    """What the background refit publishes after following ``view``'s membership."""
    performance.track(view)
    return dict(performance.refit().workers)


def test_a_view_brings_new_workers_in_at_their_pool_prior_and_drops_gone_ones() -> None:
    from gateway.types.view import LoadView, WorkerLoad

    performance = PerformanceModel(priors={PoolName.LOW_LATENCY: PRIOR})
    one = WorkerLoad("a", PoolName.LOW_LATENCY, True, 0, None, 16)
    assert curves_after_refit(performance, LoadView((one,))) == {"a": PRIOR}
    other = WorkerLoad("b", PoolName.LOW_LATENCY, True, 0, None, 16)
    assert set(curves_after_refit(performance, LoadView((other,)))) == {"b"}


def test_a_worker_not_tracked_yet_reads_as_its_pool_without_a_refit() -> None:
    performance, clock = pool_model()
    performance.track(view_of(("a", PoolName.HIGH_THROUGHPUT)))
    for _ in range(30):
        performance.on_stream_done(sample_on("a", PoolName.HIGH_THROUGHPUT, PRIOR.step(4) * 0.25))
    performance.refit()
    snapshot = performance.snapshot()
    newcomer = snapshot.curve("joined-since", PoolName.HIGH_THROUGHPUT)
    assert newcomer is not None and newcomer.step(4) < PRIOR.step(4) * 0.4  # like its peer, at once
    assert performance.snapshot() is snapshot  # reading built nothing


def test_measured_curves_replace_the_profile_prior_where_measured() -> None:
    from gateway.config import MeasuredCurve
    from gateway.routing.prior import measured_prior

    measured = MeasuredCurve(rtf={1: 0.5, 8: 0.6}, ttfp_s={1: 0.3})
    curve = measured_prior(PRIOR, measured)
    assert math.isclose(curve.rtf(1), 0.5) and math.isclose(curve.rtf(8), 0.6)
    assert math.isclose(curve.ttfp(1), 0.3)
    assert curve.rtf(16) > curve.rtf(8)  # the profile's shape carries on past the last point
    assert all(a <= b for a, b in zip(curve.step_s, curve.step_s[1:], strict=False))


def test_new_priors_restart_the_workers_of_that_pool() -> None:
    from gateway.types.view import LoadView, WorkerLoad

    performance = PerformanceModel(priors={PoolName.LOW_LATENCY: PRIOR})
    curves_after_refit(performance, LoadView((WorkerLoad("w", PoolName.LOW_LATENCY, True, 0, None, 16),)))
    faster = scaled(PRIOR, 0.5, 0.5)
    performance.set_priors({PoolName.LOW_LATENCY: faster})
    assert performance.curve("w") == faster


def test_a_worker_joining_a_pool_starts_from_what_its_peers_showed() -> None:
    from gateway.types.view import LoadView, WorkerLoad

    clock = Clock()
    performance = PerformanceModel(priors={PoolName.LOW_LATENCY: PRIOR}, clock=clock)
    first = WorkerLoad("w", PoolName.LOW_LATENCY, True, 0, None, 16)
    curves_after_refit(performance, LoadView((first,)))
    for _ in range(30):
        performance.on_stream_done(stream(4, PRIOR.step(4) * 0.25))  # this hardware is 4x faster
    clock.now += PerformanceModel.REFRESH_S
    joined = WorkerLoad("new", PoolName.LOW_LATENCY, True, 0, None, 16)
    curves = curves_after_refit(performance, LoadView((first, joined)))
    assert curves["new"].step(4) < PRIOR.step(4) * 0.4


def pool_model() -> tuple[PerformanceModel, Clock]:
    clock = Clock()
    priors = {PoolName.LOW_LATENCY: PRIOR, PoolName.HIGH_THROUGHPUT: PRIOR}
    return PerformanceModel(priors=priors, clock=clock), clock


def view_of(*workers: tuple[str, PoolName]):  # type: ignore[no-untyped-def]
    from gateway.types.view import LoadView, WorkerLoad

    return LoadView(tuple(WorkerLoad(w, pool, True, 0, None, 16) for w, pool in workers))


def sample_on(worker_id: str, pool: PoolName, step: float) -> StreamObservation:
    return StreamObservation(worker_id, pool, 4, None, tuple(PaceSample(4, 25, 25 * step) for _ in range(8)))


def test_a_worker_without_samples_follows_what_its_peers_learn_after_it_joined() -> None:
    """The starvation case: a worker predicted slower than its peers gets no traffic, so it
    must not be left at the profile's estimate while they learn the hardware is faster."""
    performance, clock = pool_model()
    fleet = view_of(("a", PoolName.HIGH_THROUGHPUT), ("b", PoolName.HIGH_THROUGHPUT))
    curves_after_refit(performance, fleet)  # both join at the prior
    for _ in range(30):
        performance.on_stream_done(sample_on("a", PoolName.HIGH_THROUGHPUT, PRIOR.step(4) * 0.25))
    clock.now += PerformanceModel.REFRESH_S
    curves = curves_after_refit(performance, fleet)
    assert curves["a"].step(4) < PRIOR.step(4) * 0.3
    assert curves["b"].step(4) == pytest.approx(curves["a"].step(4), rel=0.05)  # a near-tie: b gets its turn


def test_a_restarted_worker_starts_like_its_peers_and_then_learns_its_own_speed() -> None:
    performance, clock = pool_model()
    fleet = view_of(("a", PoolName.HIGH_THROUGHPUT), ("b", PoolName.HIGH_THROUGHPUT))
    curves_after_refit(performance, fleet)
    for worker_id in ("a", "b"):
        for _ in range(20):
            performance.on_stream_done(sample_on(worker_id, PoolName.HIGH_THROUGHPUT, PRIOR.step(4) * 0.5))
    clock.now += PerformanceModel.REFRESH_S
    curves_after_refit(performance, fleet)
    performance.reset_worker("b")
    assert performance.curve("b").step(4) == pytest.approx(PRIOR.step(4) * 0.5, rel=0.05)  # type: ignore[union-attr]
    for _ in range(20):  # cold graphs: this one is really twice as slow as its peer
        performance.on_stream_done(sample_on("b", PoolName.HIGH_THROUGHPUT, PRIOR.step(4)))
    clock.now += PerformanceModel.REFRESH_S
    assert curves_after_refit(performance, fleet)["b"].step(4) == pytest.approx(PRIOR.step(4), rel=0.1)


def test_a_pool_without_samples_takes_the_fleets_factor_and_its_own_evidence_wins() -> None:
    """A pool whose only worker just came back has no peers to lean on: predicted at the
    profile's estimate while the other pool learned this hardware is 4x faster, it would
    never be given the traffic that shows its speed. Pools share that one factor, not the
    shape of what they learned, and a pool's own samples outweigh it."""
    performance, clock = pool_model()
    fleet = view_of(("ll", PoolName.LOW_LATENCY), ("ht", PoolName.HIGH_THROUGHPUT))
    curves_after_refit(performance, fleet)
    for _ in range(30):
        performance.on_stream_done(sample_on("ll", PoolName.LOW_LATENCY, PRIOR.step(4) * 0.25))
    clock.now += PerformanceModel.REFRESH_S
    cold = curves_after_refit(performance, fleet)["ht"]
    assert cold.step(4) == pytest.approx(PRIOR.step(4) * 0.25, rel=0.05)
    ratios = [cold.step(load) / PRIOR.step(load) for load in range(1, 17)]
    assert max(ratios) == pytest.approx(min(ratios))  # one factor: the prior's shape
    assert performance.snapshot().curve("joined-since", PoolName.HIGH_THROUGHPUT) == cold  # a newcomer too
    for _ in range(30):  # this profile turns out to run at its estimate here
        performance.on_stream_done(sample_on("ht", PoolName.HIGH_THROUGHPUT, PRIOR.step(4)))
    clock.now += PerformanceModel.REFRESH_S
    curves = curves_after_refit(performance, fleet)
    assert curves["ht"].step(4) == pytest.approx(PRIOR.step(4), rel=0.05)
    assert curves["ll"].step(4) == pytest.approx(PRIOR.step(4) * 0.25, rel=0.05)


def test_a_worker_back_under_another_pool_starts_from_that_pools_prior() -> None:
    """A GPU that changed profile and kept its worker id: samples measured against the old
    profile's prior say nothing about the new one."""
    clock = Clock()
    slow = scaled(PRIOR, 2.0, 2.0)
    performance = PerformanceModel(priors={PoolName.LOW_LATENCY: PRIOR, PoolName.HIGH_THROUGHPUT: slow}, clock=clock)
    curves_after_refit(performance, view_of(("w", PoolName.LOW_LATENCY)))
    for _ in range(30):
        performance.on_stream_done(sample_on("w", PoolName.LOW_LATENCY, PRIOR.step(4) * 0.5))
    clock.now += PerformanceModel.REFRESH_S
    assert curves_after_refit(performance, view_of(("w", PoolName.LOW_LATENCY)))["w"].step(4) < PRIOR.step(4) * 0.6
    clock.now += PerformanceModel.REFRESH_S
    assert curves_after_refit(performance, view_of(("w", PoolName.HIGH_THROUGHPUT))) == {"w": slow}
    performance.on_stream_done(sample_on("w", PoolName.HIGH_THROUGHPUT, slow.step(4)))
    assert performance.describe("w")["step_samples"] == 8  # type: ignore[index]  # only the new profile's


def test_other_pools_learning_recomputes_a_cold_pool_only_when_it_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fleet level moves a sample-less pool's curves; a refit recomputes them only when
    it moved more than a rounding, so a busy pool's samples do not refit every worker."""
    performance, clock = pool_model()
    fleet = view_of(("ll", PoolName.LOW_LATENCY), ("ht", PoolName.HIGH_THROUGHPUT))
    curves_after_refit(performance, fleet)
    recomputed: list[str] = []
    recompute = performance._recompute

    def counted(worker_ids: list[str], now: float) -> None:
        recomputed.extend(worker_ids)
        recompute(worker_ids, now)

    monkeypatch.setattr(performance, "_recompute", counted)
    for _ in range(30):
        performance.on_stream_done(sample_on("ll", PoolName.LOW_LATENCY, PRIOR.step(4) * 0.5))
    clock.now += PerformanceModel.REFRESH_S
    assert curves_after_refit(performance, fleet)["ht"].step(4) < PRIOR.step(4) * 0.55
    assert sorted(recomputed) == ["ht", "ll"]
    recomputed.clear()
    performance.on_stream_done(sample_on("ll", PoolName.LOW_LATENCY, PRIOR.step(4) * 0.5))  # the same again
    clock.now += PerformanceModel.REFRESH_S
    curves_after_refit(performance, fleet)
    assert recomputed == ["ll"]


def test_reading_never_refits_only_a_refit_publishes() -> None:
    """A routing decision, a precheck or a scrape reads the snapshot; learning waits for the refit."""
    performance, clock = pool_model()
    fleet = view_of(("a", PoolName.HIGH_THROUGHPUT))
    curves_after_refit(performance, fleet)
    before = performance.snapshot()
    for _ in range(30):
        performance.on_stream_done(sample_on("a", PoolName.HIGH_THROUGHPUT, PRIOR.step(4) * 0.5))
    clock.now += 10 * PerformanceModel.REFRESH_S
    for _ in range(3):
        assert performance.snapshot() is before and performance.curve("a") == PRIOR
    assert performance.describe("a") is not None and performance.snapshot() is before  # the admin view too
    published = performance.refit()
    assert published is performance.snapshot() is not before
    assert published.workers["a"].step(4) < PRIOR.step(4) * 0.8
    assert before.workers["a"] == PRIOR  # a snapshot handed out never changes


def test_a_published_snapshot_cannot_be_changed() -> None:
    performance, _ = pool_model()
    performance.track(view_of(("a", PoolName.HIGH_THROUGHPUT)))
    snapshot = performance.refit()
    with pytest.raises(TypeError):
        snapshot.workers["a"] = PRIOR  # type: ignore[index]
    with pytest.raises(AttributeError):
        snapshot.workers = {}  # type: ignore[misc]


async def test_a_large_fleet_refits_in_short_steps_and_publishes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 learning workers: the refit yields to the event loop every few curves (requests go
    on between the steps, on the old snapshot) and publishes the new one whole, once."""
    import asyncio

    performance, clock = pool_model()
    names = [(f"w{i:02d}", PoolName.HIGH_THROUGHPUT) for i in range(64)]
    fleet = view_of(*names)
    curves_after_refit(performance, fleet)
    before = performance.snapshot()
    for worker_id, pool in names:
        performance.on_stream_done(sample_on(worker_id, pool, PRIOR.step(4) * 0.5))
    clock.now += PerformanceModel.REFRESH_S
    steps: list[int] = []
    recompute, sleep = performance._recompute, asyncio.sleep

    def counted(worker_ids: list[str], now: float) -> None:
        assert performance.snapshot() is before  # nothing half-done is ever visible
        steps.append(len(worker_ids))
        recompute(worker_ids, now)

    yields = 0

    async def counted_sleep(delay: float) -> None:
        nonlocal yields
        yields += 1
        await sleep(delay)

    monkeypatch.setattr(performance, "_recompute", counted)
    monkeypatch.setattr(asyncio, "sleep", counted_sleep)
    await performance.refit_in_steps()
    monkeypatch.undo()
    assert steps == [PerformanceModel.RECOMPUTE_PER_STEP] * (64 // PerformanceModel.RECOMPUTE_PER_STEP)
    assert yields == len(steps) - 1  # back to the event loop between every two steps
    published = performance.snapshot()
    assert published is not before and all(c.step(4) < PRIOR.step(4) * 0.8 for c in published.workers.values())


async def test_the_background_refit_follows_the_fleet_and_publishes() -> None:
    import asyncio

    performance, clock = pool_model()
    fleet = view_of(("a", PoolName.HIGH_THROUGHPUT))
    for _ in range(30):
        performance.on_stream_done(sample_on("a", PoolName.HIGH_THROUGHPUT, PRIOR.step(4) * 0.5))  # not tracked yet: ignored
    task = asyncio.create_task(performance.run(lambda: fleet, interval_s=0.001))
    try:
        while "a" not in performance.snapshot().workers:
            await asyncio.sleep(0.001)
        for _ in range(30):
            performance.on_stream_done(sample_on("a", PoolName.HIGH_THROUGHPUT, PRIOR.step(4) * 0.5))
        while performance.snapshot().workers["a"] == PRIOR:
            await asyncio.sleep(0.001)
    finally:
        task.cancel()
    assert performance.snapshot().workers["a"].step(4) < PRIOR.step(4) * 0.8


def test_the_first_snapshot_carries_the_demands_reserve_before_any_refit() -> None:
    from gateway.routing.reserve import LatencyDemand

    assert PerformanceModel(priors={PoolName.LOW_LATENCY: PRIOR}, demand=LatencyDemand()).snapshot().latency_places == 0
    assert PerformanceModel(priors={PoolName.LOW_LATENCY: PRIOR}).snapshot().latency_places is None  # no demand: pinned


def test_a_refit_pass_runs_in_steps_of_a_few_curves_and_publishes_at_its_end() -> None:
    from gateway.types.view import LoadView, WorkerLoad

    performance = PerformanceModel(priors={PoolName.LOW_LATENCY: PRIOR})
    names = [f"w{i}" for i in range(5)]
    performance.track(LoadView(tuple(WorkerLoad(n, PoolName.LOW_LATENCY, True, 0, None, 16) for n in names)))
    before = performance.snapshot()
    steps = performance.refit_steps()
    taken = 0
    for _ in steps:
        taken += 1
        assert performance.snapshot() is before  # nothing published mid-pass
    assert taken + 1 == math.ceil(len(names) / PerformanceModel.RECOMPUTE_PER_STEP)  # a yield between steps
    assert performance.snapshot() is not before and set(performance.snapshot().workers) == set(names)
