"""The default `adaptive` policy: decisions from predicted curves, and the guard rails it keeps."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.worker.profile import load_deploy_profile
from gateway.routing.adaptive import AdaptivePolicy
from gateway.routing.classes.latency import latency_grade_rtf as latency_rtf_ceiling
from gateway.routing.picker import TIE
from gateway.routing.prior import prior_curve
from gateway.types import reasons as r
from gateway.types.codec import FRAMES_PER_SECOND
from gateway.types.curve import Curve, audio_seconds_for
from gateway.types.decision import Action
from gateway.types.view import LoadView, WorkerLoad
from tests.unit.routing.fakes import HT, LL, capacity, req, scaled, thresholds

LL_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_low_latency"))
HT_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_high_throughput"))


def ll(worker_id: str = "ll-a", load: int = 0, slots: int = 16, curve: Curve = LL_CURVE, routable: bool = True) -> WorkerLoad:
    return WorkerLoad(worker_id, LL, routable, load, None, slots, curve)


def ht(worker_id: str = "ht-a", load: int = 0, slots: int = 64, curve: Curve = HT_CURVE, routable: bool = True) -> WorkerLoad:
    return WorkerLoad(worker_id, HT, routable, load, None, slots, curve)


def decide(request, *workers: WorkerLoad, **knobs: object):
    return AdaptivePolicy().decide(request, LoadView(workers), thresholds(**knobs))


def test_an_idle_fleet_serves_every_class_from_low_latency_first() -> None:
    for sla in ("latency", "balanced"):
        decision = decide(req(sla), ll(), ht())
        assert (decision.action, decision.pool) == (Action.ROUTE, LL)
    assert decide(req("latency"), ll(), ht()).reason == r.FASTEST_TTFP
    assert decide(req("balanced"), ll(), ht()).reason == r.FASTEST_FINISH


def test_decisions_carry_their_predictions() -> None:
    decision = decide(req("balanced"), ll(load=3), ht())
    assert decision.predicted_ttfp_s == LL_CURVE.ttfp(4)
    assert decision.predicted_rtf == LL_CURVE.rtf(4)


def test_balanced_moves_to_high_throughput_when_low_latency_gets_busy() -> None:
    assert decide(req("balanced"), ll(load=12), ht(load=0)).pool == HT


def test_balanced_keeps_the_reserve_below_the_low_latency_cap() -> None:
    full_ht = ht(load=64)
    decision = decide(req("balanced"), ll(load=14), full_ht, reserve_for_latency=2)
    assert (decision.action, decision.reason) == (Action.WAIT, r.QUEUED_LL_RESERVED)
    assert decide(req("latency"), ll(load=14), full_ht, reserve_for_latency=2).action == Action.ROUTE


def test_throughput_leaves_latency_grade_room_on_low_latency() -> None:
    ceiling = latency_rtf_ceiling(thresholds(), [ll(), ht()])
    most = capacity(LL_CURVE, ceiling, 16)
    full_ht = ht(load=64)
    ok = decide(req("throughput"), ll(load=most - 3), full_ht, reserve_for_latency=2)
    assert (ok.action, ok.pool) == (Action.ROUTE, LL)
    held = decide(req("throughput"), ll(load=most - 2), full_ht, reserve_for_latency=2)
    assert (held.action, held.reason) == (Action.WAIT, r.QUEUED_LL_RESERVED)


def test_throughput_goes_where_it_adds_the_most_audio_per_second() -> None:
    busy, idle = ht("ht-busy", load=48), ht("ht-idle", load=2)
    decision = decide(req("throughput"), ll(load=16), busy, idle)
    assert (decision.worker_id, decision.reason) == ("ht-idle", r.MOST_THROUGHPUT)
    # An idle low-latency worker adds the most (its step is fastest) and has room to spare.
    assert decide(req("throughput"), ll(load=0), ht(load=0)).pool == LL


def test_latency_waits_for_low_latency_then_spills() -> None:
    full = ll(load=16)
    waiting = decide(req("latency"), full, ht())
    assert (waiting.action, waiting.reason) == (Action.WAIT, r.QUEUED_LL_FULL)
    spilled = decide(req("latency", waited_out=True), full, ht())
    assert (spilled.action, spilled.pool, spilled.reason) == (Action.ROUTE, HT, r.SPILL_LL_FULL)


def test_without_low_latency_workers_every_class_says_so() -> None:
    for sla in ("latency", "balanced", "throughput"):
        decision = decide(req(sla), ll(routable=False), ht())
        assert (decision.action, decision.pool, decision.reason) == (Action.ROUTE, HT, r.NO_LL_WORKERS), sla


def test_without_high_throughput_workers_balanced_and_throughput_say_so() -> None:
    for sla in ("balanced", "throughput"):
        decision = decide(req(sla), ll(), ht(routable=False))
        assert (decision.pool, decision.reason) == (LL, r.NO_HT_WORKERS), sla


def test_no_routable_worker_is_a_reject() -> None:
    assert decide(req("balanced"), ll(routable=False)).action == Action.REJECT


def test_a_worker_learned_to_be_slow_gets_less_work() -> None:
    slow = ht("ht-slow", load=4, curve=scaled(HT_CURVE, 2.0, 2.0))
    fast = ht("ht-fast", load=4)
    assert decide(req("balanced"), slow, fast).worker_id == "ht-fast"
    assert decide(req("throughput"), slow, fast).worker_id == "ht-fast"


def test_operator_caps_win_over_predictions() -> None:
    decision = decide(req("balanced"), ll(load=2, slots=2), ht(load=30))
    assert decision.pool == HT


def test_balanced_ceiling_bounds_every_stream() -> None:
    # HT at 63 predicts an RTF near 0.85: a ceiling of 0.6 leaves no room for balanced.
    decision = decide(req("balanced"), ll(load=16), ht(load=63), balanced_rtf_ceiling=0.6)
    assert decision.action == Action.WAIT


workers = st.builds(
    lambda pool, load, slots, routable, factor, index: (
        ll(f"ll-{index}", load, min(slots, 16), scaled(LL_CURVE, factor, factor), routable)
        if pool == "ll"
        else ht(f"ht-{index}", load, slots, scaled(HT_CURVE, factor, factor), routable)
    ),
    st.sampled_from(["ll", "ht"]),
    st.integers(0, 70),
    st.integers(1, 80),
    st.booleans(),
    st.floats(0.3, 3.0),
    st.integers(0, 10_000),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(workers, min_size=1, max_size=8, unique_by=lambda w: w.worker_id),
    st.sampled_from(["latency", "balanced", "throughput"]),
    st.booleans(),
    st.integers(0, 4),
    st.integers(1, 4000),
)
def test_properties(fleet: list[WorkerLoad], sla: str, waited_out: bool, reserve: int, chars: int) -> None:
    request = replace(req(sla, waited_out), input_chars=chars)
    knobs = thresholds(reserve_for_latency=reserve)
    decision = AdaptivePolicy().decide(request, LoadView(tuple(fleet)), knobs)
    assert decision.reason in (*r.ROUTE_REASONS, *r.WAIT_REASONS, *r.REJECT_REASONS)
    if not any(w.routable for w in fleet):
        assert decision.action == Action.REJECT
    if decision.action != Action.ROUTE:
        return
    chosen = next(w for w in fleet if w.worker_id == decision.worker_id)
    assert chosen.routable
    assert chosen.load + 1 <= chosen.slots  # never past the operator's cap
    assert chosen.pool != LL or chosen.load + 1 <= 16  # never past max_num_seqs on low-latency
    assert decision.predicted_ttfp_s is not None and decision.predicted_rtf is not None
    # The reserve holds while high-throughput can take the others (else every class needs LL).
    reserve = reserve if any(w.routable and w.pool == HT and w.curve is not None for w in fleet) else 0
    if chosen.pool == LL and sla == "balanced" and reserve:
        assert chosen.load + 1 + reserve <= min(chosen.slots, 16)  # the reserve is held
    if chosen.pool == LL and sla == "throughput" and reserve:
        ceiling = latency_rtf_ceiling(knobs, [w for w in fleet if w.routable])
        assert chosen.load + 1 + reserve <= capacity(chosen.curve, ceiling, min(chosen.slots, 16))


def test_run_time_caps_apply_through_the_view_and_null_removes_one() -> None:
    from gateway.routing.performance import CurveSnapshot
    from gateway.routing.view import routing_view

    loads = LoadView((ll(slots=16), ht()))
    curves = CurveSnapshot.of({"ll-a": LL_CURVE, "ht-a": HT_CURVE})
    capped = routing_view(loads, curves, thresholds(max_per_worker={"low_latency": 3}))
    assert [w.slots for w in capped.workers] == [3, 64]
    uncapped = routing_view(loads, curves, thresholds(max_per_worker={"low_latency": None}))
    assert [w.slots for w in uncapped.workers] == [16, 64]
    assert decide(req("latency"), *routing_view(LoadView((ll(load=3), ht())), curves,
                  thresholds(max_per_worker={"low_latency": 3})).workers).action == Action.WAIT  # fmt: skip


def test_identical_idle_workers_take_turns() -> None:
    policy = AdaptivePolicy()
    fleet = LoadView((ll(), ht("ht-a"), ht("ht-b")))
    picked = []
    for _ in range(4):
        decision = policy.decide(req("throughput"), LoadView((ll(load=16), *fleet.workers[1:])), thresholds())
        picked.append(decision.worker_id)
    assert picked == ["ht-a", "ht-b", "ht-a", "ht-b"]


def test_without_high_throughput_the_reserve_does_not_strand_other_classes() -> None:
    for sla in ("balanced", "throughput"):
        decision = decide(req(sla), ll(load=14), ht(routable=False), reserve_for_latency=16)
        assert (decision.action, decision.reason) == (Action.ROUTE, r.NO_HT_WORKERS), sla


def test_curve_tables_match_their_definitions() -> None:
    for curve in (LL_CURVE, HT_CURVE, scaled(LL_CURVE, 1.7, 0.8)):
        for load in range(1, curve.max_load + 1):
            extra = (load - 1) * (curve.step(load) - curve.step(load - 1)) if load > 1 else 0.0
            assert curve.marginal_step_s[load - 1] == pytest.approx(curve.step(load) + extra)
            assert curve.gain_s[load - 1] == pytest.approx(curve.rate(load) - curve.rate(load - 1))


@settings(max_examples=300, deadline=None)
@given(st.lists(workers, min_size=1, max_size=8, unique_by=lambda w: w.worker_id), st.integers(1, 4000))
def test_balanced_picks_the_lowest_cost_within_the_tie_window(fleet: list[WorkerLoad], chars: int) -> None:
    """The policy's fast loop against the cost written out: own time plus delay imposed."""
    knobs = thresholds(reserve_for_latency=0)
    decision = AdaptivePolicy().decide(replace(req("balanced"), input_chars=chars), LoadView(tuple(fleet)), knobs)
    if decision.action != Action.ROUTE:
        return
    frames = audio_seconds_for(chars) * FRAMES_PER_SECOND

    def cost(w: WorkerLoad) -> float:
        curve, after = w.curve, w.load + 1
        assert curve is not None
        imposed = w.load * frames * (curve.step(after) - curve.step(w.load)) if w.load else 0.0
        return curve.ttfp(after) + frames * curve.step(after) + imposed

    def eligible(w: WorkerLoad) -> bool:
        cap = min(w.slots, w.curve.max_load)  # type: ignore[union-attr]
        return w.routable and w.load < cap and (w.load == 0 or w.curve.rtf(w.load + 1) <= knobs.balanced_rtf_ceiling)  # type: ignore[union-attr]

    chosen = next(w for w in fleet if w.worker_id == decision.worker_id)
    best = min(cost(w) for w in fleet if eligible(w))
    # One tie rule: anything within TIE of the best is a tie, nothing further.
    assert eligible(chosen) and cost(chosen) <= best * (1 + TIE) + 1e-12
