"""The stages every decision goes through: filters -> a float scorer -> one picker with one tie rule."""

from __future__ import annotations

import pytest

from gateway.worker.profile import load_deploy_profile
from gateway.routing.filters import WITHIN_CAP, InPool, LeavesLatencyReserve, UnderRtfCeiling, Untried
from gateway.routing.picker import TIE, TieBreak
from gateway.routing.prior import prior_curve
from gateway.routing.scorers import fewest_in_flight, predicted_ttfp
from gateway.routing.stages import Plan, Stage, place
from gateway.types import reasons as r
from gateway.types.decision import Action
from gateway.types.view import WorkerLoad
from tests.unit.routing.fakes import HT, LL

LL_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_low_latency"))
HT_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_high_throughput"))


def ll(worker_id: str = "ll-a", load: int = 0, slots: int = 16) -> WorkerLoad:
    return WorkerLoad(worker_id, LL, True, load, None, slots, LL_CURVE)


def ht(worker_id: str = "ht-a", load: int = 0, slots: int = 64) -> WorkerLoad:
    return WorkerLoad(worker_id, HT, True, load, None, slots, HT_CURVE)


def ids(workers) -> list[str]:  # type: ignore[no-untyped-def]
    return [w.worker_id for w in workers]


def test_the_cap_is_the_operators_slots_never_past_max_num_seqs() -> None:
    assert ll(slots=8).cap == 8
    assert ll(slots=40).cap == LL_CURVE.max_load == 16
    assert WorkerLoad("x", HT, True, 0, None, 80).cap == 80  # no curve: slots alone
    assert ids(WITHIN_CAP.keep([ll("a", load=7, slots=8), ll("b", load=8, slots=8), ll("c", load=15, slots=40)])) == ["a", "c"]


def test_the_ceiling_admits_an_idle_worker_whatever_its_rtf() -> None:
    slow_idle = ll("idle")
    busy = ll("busy", load=15)
    kept = UnderRtfCeiling(LL_CURVE.rtf(1) / 2).keep([slow_idle, busy])
    assert ids(kept) == ["idle"]


def test_one_reserve_rule_below_the_cap_or_the_latency_grade_capacity() -> None:
    # Below the cap (balanced): load + 1 + places <= cap.
    assert ids(LeavesLatencyReserve(2).keep([ll("a", load=13), ll("b", load=14), ht("h", load=63)])) == ["a", "h"]
    # Below the latency-grade capacity (throughput): the RTF at load + 1 + places stays latency-grade.
    grade = LL_CURVE.rtf(4)
    kept = LeavesLatencyReserve(2, grade).keep([ll("a", load=1), ll("b", load=2)])
    assert ids(kept) == ["a"]  # 1 + 1 + 2 = 4 requests at RTF(4): ok; b would make 5
    assert LeavesLatencyReserve(2).wait_reason == r.QUEUED_LL_RESERVED


def test_a_retry_never_sees_the_workers_it_tried() -> None:
    assert ids(Untried(frozenset({"a"})).keep([ll("a"), ll("b")])) == ["b"]
    workers = [ll("a")]
    assert Untried(frozenset()).keep(workers) is workers  # nothing to filter, nothing built


@pytest.mark.parametrize(("scores", "expect"), [
    ([1.0, 1.0 + TIE * 0.99, 2.0], ["a", "b", "a"]),  # within TIE of the best: round-robin
    ([1.0, 1.0 + TIE * 1.01, 0.5 + 1.0], ["a", "a", "a"]),  # just outside: the best, always
    ([-10.0, -10.0 + TIE * 9.9, -5.0], ["a", "b", "a"]),  # negative scores: relative to |best|
])  # fmt: skip
def test_one_tie_rule(scores: list[float], expect: list[str]) -> None:
    ties = TieBreak()
    workers = [ll("a"), ll("b"), ll("c")]
    assert [ties.pick(workers, scores, "fleet").worker_id for _ in expect] == expect  # type: ignore[union-attr]


def test_ties_rotate_by_id_whatever_the_views_order_and_per_scope() -> None:
    ties = TieBreak()
    forward, backward = [ll("a"), ll("b"), ll("c")], [ll("c"), ll("b"), ll("a")]
    picks = [ties.pick(view, [0.0] * 3, "pool").worker_id for view in (forward, backward, forward, backward)]  # type: ignore[union-attr]
    assert picks == ["a", "b", "c", "a"]
    assert ties.pick(forward, [0.0] * 3, "other").worker_id == "a"  # type: ignore[union-attr]


def test_place_tries_stages_in_order_and_names_the_reserve_when_it_is_all_that_is_left() -> None:
    ties = TieBreak()
    on_ll = Stage((InPool(LL), WITHIN_CAP), predicted_ttfp, "first")
    anywhere = Stage((WITHIN_CAP,), predicted_ttfp, "second")
    plan = Plan((on_ll, anywhere), r.QUEUED_ALL_FULL)
    assert place(plan, [ll(load=16), ht()], ties, "fleet").reason == "second"
    decision = place(plan, [ll(load=3), ht()], ties, "fleet")
    assert (decision.reason, decision.worker_id) == ("first", "ll-a")
    assert decision.predicted_ttfp_s == LL_CURVE.ttfp(4) and decision.predicted_rtf == LL_CURVE.rtf(4)
    reserved = Plan((Stage((WITHIN_CAP, LeavesLatencyReserve(2)), fewest_in_flight, "x"),), r.QUEUED_ALL_FULL)
    assert place(reserved, [ll(load=14), ht(load=64)], ties, "fleet").reason == r.QUEUED_LL_RESERVED
    assert place(reserved, [ll(load=16), ht(load=64)], ties, "fleet").reason == r.QUEUED_ALL_FULL
    assert place(reserved, [ll(load=16), ht(load=64)], ties, "fleet").action is Action.WAIT
