"""MoveDecider: when a desired mix turns into a GPU's profile change (pure, on a fake clock)."""

from __future__ import annotations

from gateway.supervisor.mix import Move, MoveDecider
from gateway.types import PoolName

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT
ONE_EACH = {LL: 1, HT: 1}
TWO_HT = {"low_latency": 0, "high_throughput": 2}
HOLD = 60.0


def decider(**minimums: int) -> MoveDecider:
    return MoveDecider(HOLD, {PoolName(name): count for name, count in minimums.items()})


def test_a_move_is_made_only_once_wanted_for_the_whole_hold_time() -> None:
    d = decider()
    assert d.decide(TWO_HT, ONE_EACH, 0.0) is None
    assert d.decide(TWO_HT, ONE_EACH, 59.9) is None
    assert d.decide(TWO_HT, ONE_EACH, 60.0) == Move(LL, HT)
    assert d.pending is not None and d.pending.since == 0.0


def test_the_mix_coming_back_in_between_starts_the_hold_again() -> None:
    d = decider()
    d.decide(TWO_HT, ONE_EACH, 0.0)
    assert d.decide({"low_latency": 1, "high_throughput": 1}, ONE_EACH, 30.0) is None  # matches: no move wanted
    assert d.pending is None
    assert d.decide(TWO_HT, ONE_EACH, 40.0) is None
    assert d.decide(TWO_HT, ONE_EACH, 99.0) is None  # 59 s since it was wanted again
    assert d.decide(TWO_HT, ONE_EACH, 100.0) == Move(LL, HT)


def test_a_flapping_desired_mix_never_moves_a_gpu() -> None:
    d = decider()
    two_ll = {"low_latency": 2, "high_throughput": 0}
    for step in range(100):  # every 10 s the other way: each direction held 10 s at most
        desired = TWO_HT if step % 2 == 0 else two_ll
        assert d.decide(desired, ONE_EACH, step * 10.0) is None


def test_none_means_cannot_judge_and_resets_the_hold() -> None:
    d = decider()
    d.decide(TWO_HT, ONE_EACH, 0.0)
    assert d.decide(None, ONE_EACH, 50.0) is None
    assert d.pending is None
    assert d.decide(TWO_HT, ONE_EACH, 60.0) is None  # held from 60 s now, not from 0
    assert d.decide(TWO_HT, ONE_EACH, 120.0) == Move(LL, HT)


def test_a_fleet_in_flux_is_not_judged() -> None:
    d = decider()
    d.decide(TWO_HT, ONE_EACH, 0.0)
    assert d.decide(TWO_HT, None, 70.0) is None  # a worker starting
    assert d.pending is None


def test_never_below_a_pools_minimum() -> None:
    d = decider(low_latency=1)
    assert d.decide(TWO_HT, ONE_EACH, 0.0) is None
    assert d.decide(TWO_HT, ONE_EACH, 1000.0) is None
    # With two low-latency workers one may go.
    assert d.decide({"low_latency": 1, "high_throughput": 2}, {LL: 2, HT: 1}, 1000.0) is None
    assert d.decide({"low_latency": 1, "high_throughput": 2}, {LL: 2, HT: 1}, 1060.0) == Move(LL, HT)


def test_the_other_direction() -> None:
    d = decider()
    back = {"low_latency": 1, "high_throughput": 1}
    d.decide(back, {LL: 0, HT: 2}, 0.0)
    assert d.decide(back, {LL: 0, HT: 2}, HOLD) == Move(HT, LL)


def test_growing_or_shrinking_the_fleet_is_not_a_profile_change() -> None:
    d = decider()
    for desired in ({"low_latency": 2, "high_throughput": 2}, {"low_latency": 0, "high_throughput": 1}):
        d.decide(desired, ONE_EACH, 0.0)
        assert d.decide(desired, ONE_EACH, 10 * HOLD) is None


def test_more_than_one_gpu_short_still_moves_one_at_a_time() -> None:
    d = decider()
    desired = {"low_latency": 0, "high_throughput": 4}  # more than the fleet has: still one move
    d.decide(desired, {LL: 2, HT: 1}, 0.0)
    assert d.decide(desired, {LL: 2, HT: 1}, HOLD) == Move(LL, HT)


def test_a_pool_the_planner_says_nothing_about_is_no_judgement() -> None:
    d = decider()
    d.decide({"high_throughput": 2}, ONE_EACH, 0.0)
    assert d.decide({"high_throughput": 2}, ONE_EACH, 10 * HOLD) is None


def test_reset_after_a_move_holds_the_next_from_the_start() -> None:
    d = decider()
    d.decide(TWO_HT, {LL: 2, HT: 0}, 0.0)
    assert d.decide(TWO_HT, {LL: 2, HT: 0}, HOLD) == Move(LL, HT)
    d.reset()
    assert d.decide(TWO_HT, {LL: 1, HT: 1}, HOLD + 1) is None
    assert d.decide(TWO_HT, {LL: 1, HT: 1}, 2 * HOLD + 1) == Move(LL, HT)
