"""Voice affinity: a request with a reference goes to a worker that probably holds its codes
when that is no worse for its class; the hint is data in ``RequestInfo`` (a pure policy)."""

from __future__ import annotations

from dataclasses import replace

from gateway.config import RoutingThresholds
from gateway.worker.profile import load_deploy_profile
from gateway.worker.timing import TimingParams
from gateway.routing.adaptive import AdaptivePolicy
from gateway.routing.picker import TieBreak
from gateway.routing.prior import prior_curve
from gateway.types import reasons as r
from gateway.types.decision import Action
from gateway.types.view import LoadView, RequestInfo, WorkerLoad
from tests.unit.routing.fakes import HT, LL, req, thresholds

LL_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_low_latency"))
HT_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_high_throughput"))


def ll(worker_id: str, load: int = 0) -> WorkerLoad:
    return WorkerLoad(worker_id, LL, True, load, None, 16, LL_CURVE)


def ht(worker_id: str = "ht-a", load: int = 0) -> WorkerLoad:
    return WorkerLoad(worker_id, HT, True, load, None, 64, HT_CURVE)


def warm(request: RequestInfo, *workers: str, clip_s: float | None = None) -> RequestInfo:
    return replace(request, warm_workers=frozenset(workers), reference_s=clip_s)


def queue_ms(load: int) -> float:
    """How much later a request's first packet comes on a low-latency worker already
    carrying ``load`` requests than on an idle one (the prior's curve)."""
    return (LL_CURVE.ttfp_s[load] - LL_CURVE.ttfp_s[0]) * 1000


def picks(request: RequestInfo, *workers: WorkerLoad, **knobs: object) -> list[str | None]:
    """Four decisions in a row by one policy (the tie rotation would alternate them)."""
    policy = AdaptivePolicy()
    return [policy.decide(request, LoadView(workers), thresholds(**knobs)).worker_id for _ in range(4)]


def test_equal_workers_rotate_without_a_hint_and_keep_to_the_warm_one_with_it() -> None:
    fleet = (ll("ll-a"), ll("ll-b"), ht())
    assert picks(req("latency"), *fleet) == ["ll-a", "ll-b", "ll-a", "ll-b"]
    assert picks(warm(req("latency"), "ll-b"), *fleet) == ["ll-b"] * 4


def test_a_warm_worker_wins_when_the_encode_it_skips_makes_up_the_difference() -> None:
    close = (ll("ll-a", 0), ll("ll-b", 1), ht())  # one more stream: a few ms slower to first packet
    far = (ll("ll-a", 0), ll("ll-b", 12), ht())
    gap_ms = (LL_CURVE.ttfp_s[1] - LL_CURVE.ttfp_s[0]) * 1000
    assert 0 < gap_ms < 40 < (LL_CURVE.ttfp_s[12] - LL_CURVE.ttfp_s[0]) * 1000
    assert picks(warm(req("latency"), "ll-b"), *close)[0] == "ll-b"
    assert picks(warm(req("latency"), "ll-b"), *far)[0] == "ll-a", "no worse for its class"
    assert picks(warm(req("latency"), "ll-b"), *close, voice_affinity_bonus_ms=0.0)[0] == "ll-a", "0: ties only"
    assert picks(warm(req("latency"), "ll-b"), ll("ll-a"), ll("ll-b"), ht(), voice_affinity=False) == ["ll-a", "ll-b"] * 2


def test_throughput_prefers_a_warm_worker_only_among_ties() -> None:
    fleet = (ht("ht-a", 8), ht("ht-b", 9))  # not a tie for the throughput it adds
    assert picks(warm(req("throughput"), "ht-b"), *fleet)[0] == "ht-a"
    assert picks(warm(req("throughput"), "ht-b"), ht("ht-a"), ht("ht-b")) == ["ht-b"] * 4


def test_the_classs_filters_still_hold() -> None:
    # balanced keeps the latency reserve on low-latency: a warm worker inside it is not a candidate.
    full = (ll("ll-a", 14), ht("ht-a", 10))
    decision = AdaptivePolicy().decide(warm(req(), "ll-a"), LoadView(full), thresholds())
    assert (decision.action, decision.worker_id) == (Action.ROUTE, "ht-a")
    # latency never leaves low-latency for a warm high-throughput worker within its budget.
    decision = AdaptivePolicy().decide(warm(req("latency"), "ht-a"), LoadView((ll("ll-a"), ht())), thresholds())
    assert (decision.reason, decision.worker_id) == (r.FASTEST_TTFP, "ll-a")
    # a retry never goes back to a tried worker, warm or not.
    retry = replace(warm(req("latency"), "ll-a"), waited_out=True, tried=frozenset({"ll-a"}))
    assert AdaptivePolicy().decide(retry, LoadView((ll("ll-a"), ll("ll-b"), ht())), thresholds()).worker_id == "ll-b"


def test_the_picker_prefers_the_best_scored_warm_worker_and_remembers_it() -> None:
    ties = TieBreak()
    workers = [ll("ll-a"), ll("ll-b"), ll("ll-c")]
    assert ties.pick(workers, [1.0, 1.05, 1.02], "s", frozenset({"ll-b", "ll-c"}), 0.1) is workers[2]
    assert ties.last("s") == "ll-c"
    assert ties.pick(workers, [1.0, 1.5, 1.5], "s", frozenset({"ll-b"}), 0.1) is workers[0]
    assert ties.pick(workers, [1.0, 1.02, 1.5], "s", frozenset({"ll-b"}), 0.0) is workers[1], "within TIE: a tie"


def test_a_warm_worker_wins_while_its_queue_costs_less_than_the_encode_a_cold_one_must_do() -> None:
    # The released worker encodes 6 ms per second of clip: a 6 s clip costs a cold worker 36 ms.
    idle, busy, much_busier = ll("ll-a", 0), ll("ll-b", 3), ll("ll-b", 8)
    assert queue_ms(3) < 36 < queue_ms(8)
    assert picks(warm(req("latency"), "ll-b", clip_s=6.0), idle, busy, ht()) == ["ll-b"] * 4
    assert picks(warm(req("latency"), "ll-b", clip_s=6.0), idle, much_busier, ht())[0] == "ll-a"


def test_the_encode_a_cold_worker_must_do_grows_with_the_clip() -> None:
    idle, busy = ll("ll-a", 0), ll("ll-b", 3)
    assert 2.0 * 6 < queue_ms(3) < 6.0 * 6  # a 2 s clip encodes in 12 ms: less than that queue
    assert picks(warm(req("latency"), "ll-b", clip_s=2.0), idle, busy, ht())[0] == "ll-a"
    assert picks(warm(req("latency"), "ll-b", clip_s=30.0), idle, ll("ll-b", 8), ht())[0] == "ll-b"
    # Of unknown length (a URL): voice_affinity_bonus_ms stands for its encode.
    assert picks(warm(req("latency"), "ll-b"), idle, busy, ht(), voice_affinity_bonus_ms=10.0)[0] == "ll-a"
    assert picks(warm(req("latency"), "ll-b"), idle, busy, ht(), voice_affinity_bonus_ms=30.0)[0] == "ll-b"
    # The rate is a threshold like the others (another GPU encodes faster or slower).
    assert picks(warm(req("latency"), "ll-b", clip_s=2.0), idle, busy, ht(), voice_affinity_encode_ms_per_second=15.0)[0] == "ll-b"


def test_requests_without_a_reference_route_as_without_affinity() -> None:
    fleet = (ll("ll-a", 0), ll("ll-b", 1), ll("ll-c", 3), ht())
    knobs = {"voice_affinity_encode_ms_per_second": 1000.0, "voice_affinity_bonus_ms": 1000.0}
    assert picks(req("latency"), *fleet, **knobs) == picks(req("latency"), *fleet)
    assert picks(req("latency"), *fleet) == picks(req("latency"), *fleet, voice_affinity=False)
    # A hint naming no candidate (a warm worker the filters left out) changes nothing either.
    assert picks(warm(req("latency"), "ht-a", clip_s=6.0), *fleet) == picks(req("latency"), *fleet)


def test_the_default_encode_rate_is_the_workers() -> None:
    assert RoutingThresholds().voice_affinity_encode_ms_per_second == TimingParams().ref_audio_encode_ms_per_second
