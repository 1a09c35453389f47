"""Readiness that means "can serve": ready while any pool has a routable worker, degraded
(which pool, since when) while one is empty, logged once per transition."""

from __future__ import annotations

import logging

import pytest

from gateway.pools.availability import PoolAvailability
from gateway.types import PoolName

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT


class Pools:
    def __init__(self) -> None:
        self.routable = {LL: 0, HT: 0}
        self.now = 50.0

    def count(self, pool: PoolName) -> int:
        return self.routable[pool]

    def clock(self) -> float:
        return self.now


def availability(pools: Pools, requires: str = "any_pool") -> PoolAvailability:
    return PoolAvailability(pools.count, requires, clock=pools.clock, wall_clock=lambda: 1_000_000.0 + pools.now)  # type: ignore[arg-type]


def test_ready_while_any_pool_serves_and_degraded_names_the_empty_one() -> None:
    pools = Pools()
    state = availability(pools)
    assert state.current().status == "not_ready"
    pools.routable = {LL: 1, HT: 2}
    assert state.current().status == "ready" and not state.current().degraded

    pools.now = 60.0
    pools.routable[LL] = 0
    state.refresh()
    pools.now = 75.0
    now = state.current()
    assert now.ready and now.degraded and now.status == "degraded"
    assert now.empty_pools == ["low_latency"] and now.routable == {"low_latency": 0, "high_throughput": 2}
    assert now.empty_for_s == {"low_latency": 15.0} and now.empty_since == {"low_latency": 1_000_060.0}

    pools.routable[HT] = 0
    assert state.current().status == "not_ready" and not state.current().degraded
    pools.routable = {LL: 1, HT: 1}
    assert state.current().status == "ready" and state.current().empty_since == {}


def test_the_strict_meaning_needs_every_pool() -> None:
    pools = Pools()
    state = availability(pools, "every_pool")
    pools.routable = {LL: 0, HT: 1}
    now = state.current()
    assert not now.ready and now.degraded and now.status == "not_ready"
    pools.routable[LL] = 1
    assert state.current().ready


def test_each_transition_is_logged_once_not_per_request(caplog: pytest.LogCaptureFixture) -> None:
    pools = Pools()
    state = availability(pools)
    with caplog.at_level(logging.INFO, logger="higgs_gateway.availability"):
        pools.routable = {LL: 1, HT: 1}
        state.refresh()  # the first fill at start-up is one line, for the whole fleet
        pools.routable[LL] = 0
        for _ in range(50):  # every lease release refreshes
            state.refresh()
        pools.routable[LL] = 2
        for _ in range(50):
            state.refresh()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3, messages
    assert messages[0].startswith("every pool has a routable worker")
    assert "low_latency has no routable worker" in messages[1] and "high_throughput" in messages[1]
    assert caplog.records[1].levelno == logging.WARNING
    assert "low_latency serves again" in messages[2]


def test_the_first_moment_every_pool_serves_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    pools = Pools()
    state = availability(pools)
    announced = lambda: [r for r in caplog.records if "every pool has a routable worker" in r.getMessage()]  # noqa: E731
    with caplog.at_level(logging.INFO, logger="higgs_gateway.availability"):
        pools.routable[LL] = 1
        state.refresh()
        assert announced() == []  # low-latency alone: the demo is not warm yet
        pools.routable[HT] = 1
        state.refresh()
        [record] = announced()
        assert "low_latency: 1, high_throughput: 1" in record.getMessage()
        pools.routable[HT] = 0
        state.refresh()
        pools.routable[HT] = 2
        state.refresh()
    assert len(announced()) == 1  # later recoveries have their own line


def test_pools_emptied_by_a_stop_are_not_logged_as_lost(caplog: pytest.LogCaptureFixture) -> None:
    # A clean Ctrl-C stopped the workers, then logged a warning and "no pool can serve" as an error.
    pools = Pools()
    state = availability(pools)
    pools.routable = {LL: 1, HT: 1}
    state.refresh()
    state.stopping()
    with caplog.at_level(logging.INFO, logger="higgs_gateway.availability"):
        pools.routable[LL] = 0
        state.refresh()
        pools.routable[HT] = 0
        state.refresh()
    assert caplog.records == []
    assert state.current().status == "not_ready"  # /ready still tells the truth
