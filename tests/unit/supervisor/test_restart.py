"""Backoff and crash-loop decisions, on a clock the test controls."""

from __future__ import annotations

import random

from gateway.config import LaunchConfig
from gateway.supervisor.restart import JITTER, RestartPolicy


def policy(**kw: float) -> RestartPolicy:
    args = {"backoff_initial_s": 1.0, "backoff_max_s": 10.0, "crash_loop_exits": 100, "crash_loop_window_s": 300.0}
    args.update(kw)
    return RestartPolicy(rng=random.Random(7), **args)  # type: ignore[arg-type]


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    p = policy()
    delays = [p.on_exit(now=float(i)).delay_s for i in range(8)]
    for n, delay in enumerate(delays, start=1):
        base = min(10.0, 2.0 ** (n - 1))
        assert base * (1 - JITTER) <= delay <= base
    assert delays[-1] <= 10.0


def test_jitter_spreads_workers_that_died_together() -> None:
    delays = {RestartPolicy(1.0, 60.0, 5, 300.0, random.Random(seed)).on_exit(0.0).delay_s for seed in range(10)}
    assert len(delays) > 1


def test_gives_up_at_the_crash_loop_limit() -> None:
    p = policy(crash_loop_exits=3, crash_loop_window_s=60.0)
    decisions = [p.on_exit(now=t) for t in (0.0, 1.0, 2.0)]
    assert [d.give_up for d in decisions] == [False, False, True]
    assert decisions[-1].exits_in_window == 3


def test_exits_outside_the_window_are_forgotten() -> None:
    p = policy(crash_loop_exits=3, crash_loop_window_s=60.0)
    decisions = [p.on_exit(now=t) for t in (0.0, 50.0, 120.0, 170.0, 240.0)]
    assert not any(d.give_up for d in decisions)
    # A worker that stays up a whole window starts again from the initial backoff.
    assert max(d.exits_in_window for d in decisions) == 2
    assert policy().on_exit(0.0).delay_s <= 1.0


def test_reset_forgets_exits() -> None:
    p = policy(crash_loop_exits=2)
    p.on_exit(0.0)
    p.reset()
    assert not p.on_exit(1.0).give_up


def test_from_launch_reads_the_config() -> None:
    launch = LaunchConfig(
        gpus=["0"], restart_backoff_initial_s=2.0, restart_backoff_max_s=3.0, crash_loop_restarts=4, crash_loop_window_s=9.0
    )
    p = RestartPolicy.from_launch(launch, random.Random(1))
    assert (p.backoff_initial_s, p.backoff_max_s, p.crash_loop_exits, p.crash_loop_window_s) == (2.0, 3.0, 4, 9.0)
    assert p.delay(1) <= 2.0 and p.delay(10) <= 3.0
