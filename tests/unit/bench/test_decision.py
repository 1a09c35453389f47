"""The decision-cost benchmark runs every class on a mixed fleet and reports best and median."""

from __future__ import annotations

from gateway.bench.decision import fleet_view, main, time_decisions
from gateway.types import PoolName


def test_the_fleet_is_half_of_each_pool_with_curves() -> None:
    view = fleet_view(8)
    assert sum(w.pool is PoolName.LOW_LATENCY for w in view.workers) == 4
    assert all(w.curve is not None and 0 <= w.load < w.curve.max_load for w in view.workers)


def test_every_class_is_timed(capsys) -> None:  # type: ignore[no-untyped-def]
    timed = time_decisions(4, rounds=20, repeats=2)
    assert set(timed) == {"latency", "balanced", "throughput"}
    assert all(0 < best <= median for best, median in timed.values())
    assert main(["--workers", "2"]) == 0
    assert "| 2 |" in capsys.readouterr().out
