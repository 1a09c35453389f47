"""The `rules` policy, one row per situation: every class, every reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.routing.rules import RulesPolicy, balanced_mode
from gateway.types import reasons as r
from gateway.types.decision import Action
from gateway.types.view import LoadView, RequestInfo
from tests.unit.routing.fakes import HT, LL, ht, ll, req, thresholds, view

ROUTE, WAIT, REJECT = Action.ROUTE, Action.WAIT, Action.REJECT


@dataclass
class Case:
    id: str
    request: RequestInfo
    view: LoadView
    expect: tuple[Action, str, str | None]  # action, reason, worker_id
    knobs: dict[str, Any] = field(default_factory=dict)


FULL_LL = ll("ll-a", load=4)
FULL_HT = ht("ht-a", load=64)

CASES = [
    # --- latency ----------------------------------------------------------------------
    Case("latency/ll free", req("latency"), view(ll("ll-a", 1), ll("ll-b", 0), ht("ht-a")), (ROUTE, r.LL_SLOT_FREE, "ll-b")),
    Case("latency/ll full waits within budget", req("latency"), view(FULL_LL, ht("ht-a")), (WAIT, r.QUEUED_LL_FULL, None)),
    Case("latency/budget spent spills", req("latency", waited_out=True), view(FULL_LL, ht("ht-a")), (ROUTE, r.SPILL_LL_FULL, "ht-a")),
    Case("latency/budget spent, ll free again", req("latency", waited_out=True), view(ll("ll-a", 3), ht("ht-a")), (ROUTE, r.LL_SLOT_FREE, "ll-a")),
    Case("latency/budget spent, all full", req("latency", waited_out=True), view(FULL_LL, FULL_HT), (WAIT, r.QUEUED_ALL_FULL, None)),
    Case("latency/no ll workers", req("latency"), view(ll("ll-a", routable=False), ht("ht-a")), (ROUTE, r.NO_LL_WORKERS, "ht-a")),
    Case("latency/no ll workers, ht full", req("latency"), view(FULL_HT), (WAIT, r.QUEUED_ALL_FULL, None)),
    Case("latency/budget spent, no ht workers", req("latency", waited_out=True), view(FULL_LL), (WAIT, r.QUEUED_ALL_FULL, None)),
    Case("latency/stale report falls back to inflight", req("latency"), view(ll("ll-a", 1, reported=None), ll("ll-b", 0, reported=3)), (ROUTE, r.LL_SLOT_FREE, "ll-a")),
    Case("latency/report fills a worker", req("latency"), view(ll("ll-a", 0, reported=4), ht("ht-a")), (WAIT, r.QUEUED_LL_FULL, None)),
    Case("latency/draining and ejected excluded", req("latency"), view(ll("ll-a", 0, routable=False), ll("ll-b", 2), ll("ll-c", 0, routable=False)), (ROUTE, r.LL_SLOT_FREE, "ll-b")),
    # --- balanced (threshold None = routable ll capacity) --------------------------------
    Case("balanced/under threshold", req(), view(ll("ll-a", 1), ll("ll-b", 2), ht("ht-a", 2)), (ROUTE, r.BALANCED_UNDER_THRESHOLD, "ll-a")),
    Case("balanced/at threshold goes ht", req(), view(ll("ll-a", 3), ll("ll-b", 3), ht("ht-a", 2)), (ROUTE, r.BALANCED_OVER_THRESHOLD, "ht-a")),
    Case("balanced/over threshold, ht full", req(), view(ll("ll-a", 1), ht("ht-a", 8, slots=8)), (ROUTE, r.SPILL_HT_FULL, "ll-a"), {"balanced_threshold": 4}),
    Case("balanced/under threshold, ll full", req(), view(FULL_LL, ht("ht-a")), (ROUTE, r.SPILL_LL_FULL, "ht-a"), {"balanced_threshold": 100}),
    Case("balanced/all full", req(), view(FULL_LL, FULL_HT), (WAIT, r.QUEUED_ALL_FULL, None)),
    Case("balanced/explicit threshold", req(), view(ll("ll-a", 1), ll("ll-b", 1), ht("ht-a", 0)), (ROUTE, r.BALANCED_OVER_THRESHOLD, "ht-a"), {"balanced_threshold": 2}),
    Case("balanced/draining ll shrinks capacity", req(), view(ll("ll-a", 0, routable=False), ll("ll-b", 2), ht("ht-a", 2)), (ROUTE, r.BALANCED_OVER_THRESHOLD, "ht-a")),
    Case("balanced/no ll workers", req(), view(ht("ht-a")), (ROUTE, r.NO_LL_WORKERS, "ht-a")),
    Case("balanced/no ht workers, under", req(), view(ll("ll-a", 1)), (ROUTE, r.BALANCED_UNDER_THRESHOLD, "ll-a")),
    Case("balanced/no ht workers, over", req(), view(ll("ll-a", 3), ht("ht-a", 5, routable=False)), (ROUTE, r.NO_HT_WORKERS, "ll-a")),
    # --- throughput (reserve 2 per routable ll worker, set in each case) -------------------
    Case("throughput/ht free", req("throughput"), view(ll("ll-a"), ht("ht-a", 10), ht("ht-b", 3)), (ROUTE, r.THROUGHPUT_DEFAULT, "ht-b")),
    Case("throughput/borrow beyond reserve", req("throughput"), view(ll("ll-a", 1), FULL_HT), (ROUTE, r.BORROW_LL, "ll-a"), {"reserve_for_latency": 2}),
    Case("throughput/borrow stops at reserve", req("throughput"), view(ll("ll-a", 2), FULL_HT), (WAIT, r.QUEUED_LL_RESERVED, None), {"reserve_for_latency": 2}),
    Case("throughput/reserve counts every routable ll", req("throughput"), view(ll("ll-a", 0), ll("ll-b", 3), FULL_HT), (ROUTE, r.BORROW_LL, "ll-a"), {"reserve_for_latency": 2}),
    Case("throughput/reserve ignores draining ll", req("throughput"), view(ll("ll-a", 2), ll("ll-b", 0, routable=False), FULL_HT), (WAIT, r.QUEUED_LL_RESERVED, None), {"reserve_for_latency": 2}),
    Case("throughput/zero reserve", req("throughput"), view(ll("ll-a", 3), FULL_HT), (ROUTE, r.BORROW_LL, "ll-a"), {"reserve_for_latency": 0}),
    Case("throughput/all full", req("throughput"), view(FULL_LL, FULL_HT), (WAIT, r.QUEUED_ALL_FULL, None)),
    Case("throughput/no ht workers", req("throughput"), view(ll("ll-a", 0)), (ROUTE, r.NO_HT_WORKERS, "ll-a")),
    Case("throughput/no ht workers, reserve", req("throughput"), view(ll("ll-a", 2)), (WAIT, r.QUEUED_LL_RESERVED, None), {"reserve_for_latency": 2}),
    # --- no workers ----------------------------------------------------------------------
    Case("latency/no workers", req("latency"), view(), (REJECT, r.NO_WORKERS, None)),
    Case("balanced/none routable", req(), view(ll("ll-a", routable=False), ht("ht-a", routable=False)), (REJECT, r.NO_WORKERS, None)),
    Case("throughput/no workers", req("throughput"), view(), (REJECT, r.NO_WORKERS, None)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_adaptive_decides(case: Case) -> None:
    decision = RulesPolicy().decide(case.request, case.view, thresholds(**case.knobs))
    assert (decision.action, decision.reason, decision.worker_id) == case.expect
    if decision.action == ROUTE:
        assert decision.pool == (LL if decision.worker_id.startswith("ll") else HT)  # type: ignore[union-attr]


def test_every_adaptive_reason_is_covered() -> None:
    adaptive_reasons = {
        r.LL_SLOT_FREE, r.SPILL_LL_FULL, r.BALANCED_UNDER_THRESHOLD, r.BALANCED_OVER_THRESHOLD,
        r.SPILL_HT_FULL, r.THROUGHPUT_DEFAULT, r.BORROW_LL, r.NO_LL_WORKERS, r.NO_HT_WORKERS,
        *r.WAIT_REASONS, r.NO_WORKERS,
    }  # fmt: skip
    assert adaptive_reasons <= {c.expect[1] for c in CASES}


# Threshold 4 (one ll worker of 4 slots), hysteresis 2: enter ht at 4, leave below 2.
HYSTERESIS_STEPS = [(0, LL), (3, LL), (4, HT), (3, HT), (2, HT), (1, LL), (3, LL), (5, HT), (1, LL)]


def test_balanced_hysteresis_enters_and_leaves() -> None:
    policy, knobs = RulesPolicy(), thresholds(balanced_threshold=4, balanced_hysteresis=2)
    seen = []
    for fleet_load, _ in HYSTERESIS_STEPS:
        # Load sits on ht so both pools always have room; only the policy's own mode decides.
        decision = policy.decide(req(), view(ll("ll-a", 0, slots=8), ht("ht-a", fleet_load)), knobs)
        seen.append((fleet_load, decision.pool))
        assert decision.reason in (r.BALANCED_UNDER_THRESHOLD, r.BALANCED_OVER_THRESHOLD)
    assert seen == HYSTERESIS_STEPS


@pytest.mark.parametrize(
    ("on_ht", "load", "threshold", "hysteresis", "expect"),
    [
        (False, 3, 4, 2, False),
        (False, 4, 4, 2, True),
        (True, 2, 4, 2, True),
        (True, 1, 4, 2, False),
        (True, 3, 4, 0, False),
        (False, 0, 0, 2, True),  # threshold 0: balanced never uses low-latency
    ],
)
def test_balanced_mode(on_ht: bool, load: int, threshold: int, hysteresis: int, expect: bool) -> None:
    assert balanced_mode(on_ht, load, threshold, hysteresis) is expect


def primed(last: str | None) -> RulesPolicy:
    """A rules policy whose last low-latency pick was ``last``."""
    policy = RulesPolicy()
    if last is not None:
        assert policy.decide(req("latency"), view(ll(last)), thresholds()).worker_id == last
    return policy


@pytest.mark.parametrize(
    ("last", "expect"),
    [(None, "ll-a"), ("ll-a", "ll-b"), ("ll-b", "ll-c"), ("ll-c", "ll-a"), ("ll-zz", "ll-a")],
)
def test_ties_break_round_robin(last: str | None, expect: str) -> None:
    policy = primed(last)
    tied = view(ll("ll-c", 1), ll("ll-a", 1), ll("ll-b", 1), ll("ll-d", 2))
    assert policy.decide(req("latency"), tied, thresholds()).worker_id == expect
    # The next tie continues from that pick.
    after = sorted(["ll-a", "ll-b", "ll-c"])
    assert policy.decide(req("latency"), tied, thresholds()).worker_id == after[(after.index(expect) + 1) % 3]


def test_rotation_across_calls() -> None:
    policy, knobs = RulesPolicy(), thresholds()
    tied = view(ll("ll-a"), ll("ll-b"), ll("ll-c"))
    picked = [policy.decide(req("latency"), tied, knobs).worker_id for _ in range(4)]
    assert picked == ["ll-a", "ll-b", "ll-c", "ll-a"]


def test_wait_and_reject_keep_cursor() -> None:
    policy = primed("ll-a")
    assert policy.decide(req("latency"), view(FULL_LL), thresholds()).action == WAIT
    assert policy.decide(req("latency"), view(), thresholds()).action == REJECT
    tied = view(ll("ll-a"), ll("ll-b"), ll("ll-c"))
    assert policy.decide(req("latency"), tied, thresholds()).worker_id == "ll-b"  # still after ll-a


def test_each_policy_owns_its_memory() -> None:
    """Two policies never share a rotation (no state union passed around)."""
    first, second = primed("ll-a"), RulesPolicy()
    tied = view(ll("ll-a"), ll("ll-b"))
    assert (first.decide(req("latency"), tied, thresholds()).worker_id, second.decide(req("latency"), tied, thresholds()).worker_id) == ("ll-b", "ll-a")
