"""The ceiling of 1 low-latency + 1 high-throughput, from one-worker runs."""

from __future__ import annotations

import pytest

from gateway.simulator import ceiling
from gateway.simulator.ceiling import CeilingRow, ceiling_rows, ceiling_table, needed_loads


def test_the_best_split_and_the_best_static_fleet_come_from_the_one_worker_rates() -> None:
    ll = {1: 4.0, 2: 6.5, 3: 7.5, 4: 8.0}  # saturates early
    ht = {1: 3.0, 2: 6.0, 3: 9.0, 4: 12.0}  # linear
    rows = {row.concurrency: row for row in ceiling_rows([1, 2, 4], ll, ht)}
    assert rows[1] == CeilingRow(1, 1, 4.0, 4.0, "ll+ll")  # one request: the faster worker, the other idle
    assert (rows[2].ll_share, rows[2].best_split) == (1, 7.0)  # 4 + 3 beats 6.5 + 0
    assert (rows[2].best_static, rows[2].static_fleet) == (8.0, "ll+ll")
    assert (rows[4].ll_share, rows[4].best_split) == (1, 13.0)  # 4 + 9
    assert (rows[4].best_static, rows[4].static_fleet) == (13.0, "ll+ll")  # 6.5 x 2 beats 6 x 2
    assert rows[4].ratio == pytest.approx(1.0)


def test_past_a_workers_max_load_its_rate_stays_at_its_best() -> None:
    ll = {1: 4.0, 2: 7.0}
    ht = {1: 3.0, 2: 6.0}
    (row,) = ceiling_rows([8], ll, ht)
    assert row.best_split == 13.0 and row.best_static == 14.0


def test_needed_loads_cover_every_split_and_half_fleet() -> None:
    ll, ht = needed_loads([4, 64], ll_max=16, ht_max=64)
    assert ll == list(range(1, 17))
    assert set(range(1, 5)) <= set(ht) and set(range(48, 65)) <= set(ht) and 32 in ht


def test_measured_on_the_simulator_one_request_is_one_worker_and_the_split_never_beats_physics() -> None:
    rows = ceiling.measure([1, 4], seed=0)
    assert [row.concurrency for row in rows] == [1, 4]
    assert rows[0].ratio == pytest.approx(1.0)  # one request: the low-latency worker alone
    assert 0.5 < rows[1].ratio <= 1.05
    table = "\n".join(ceiling_table(rows, []))
    assert "best split / best static (one-worker runs)" in table and "| c1 | c4 |" in table
    lines = ceiling.as_csv(rows).splitlines()
    assert lines[0].startswith("concurrency,ll_requests,ht_requests") and lines[1].startswith("1,1,0,")
