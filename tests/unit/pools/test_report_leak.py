"""A worker whose /load leaks: told apart from other replicas' load once the fleet's count is exact."""

from __future__ import annotations

from gateway.pools.report_leak import LEAK_CONFIRM_S, LeakWatch
from gateway.pools.worker import Worker
from gateway.types import PoolName

STALE_S = 3.0


def worker() -> Worker:
    return Worker("ll-a", PoolName.LOW_LATENCY, "http://ll-a", 4)


def test_lag_comes_and_goes_a_leak_stays() -> None:
    watch = LeakWatch()
    # A release the worker had not counted yet: excess 1 now and then, not in every report.
    assert [watch.observe(t, 1 if t % 3 == 0 else 0) for t in range(30)][-1] == 0
    leaking = LeakWatch()
    answers = [leaking.observe(float(t), 4 + (t % 2)) for t in range(30)]
    assert answers[int(LEAK_CONFIRM_S) - 1] == 0  # not watched long enough yet
    assert answers[-1] == 4  # the smallest excess over the window


def test_a_leak_ends_with_the_first_report_that_shows_none() -> None:
    watch = LeakWatch()
    for t in range(20):
        watch.observe(float(t), 4)
    assert watch.observe(20.0, 0) == 0  # restarted: trusted again at once


def test_the_fleet_view_routes_on_the_exact_count_and_learns_the_leak() -> None:
    w = worker()
    w.apply_fleet_leases(1)
    w.lease_taken()
    for t in range(20):
        w.record_report(2 + 4, float(t))  # 2 real (ours + another replica's) + 4 leaked
    assert w.report_leak == 4
    assert w.load_view(19.0, STALE_S).reported == 2  # the exact count, the leak not obeyed
    described = w.describe(19.0, STALE_S)
    assert described["report_leak"] == 4 and described["report_trusted"] is False


def test_without_the_fleet_view_a_learned_leak_is_subtracted_from_reports() -> None:
    w = worker()
    w.apply_fleet_leases(0)
    for t in range(20):
        w.record_report(4, float(t))  # idle, but its counter says 4
    assert w.report_leak == 4
    w.apply_fleet_leases(None)  # the store went away: back to reports, corrected
    w.record_report(5, 20.0)  # one more request, from a replica we no longer see
    assert w.load_view(20.0, STALE_S).reported == 1
    assert w.report_leak == 4  # kept while it cannot be measured


def test_no_fleet_view_no_leak_detection() -> None:
    w = worker()
    for t in range(20):
        w.record_report(4, float(t))
    assert w.report_leak == 0 and w.load_view(19.0, STALE_S).reported == 4
