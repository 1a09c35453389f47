"""Each SLA class, one row per situation: where it goes, when it waits, spills, and retries."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from gateway.worker.profile import load_deploy_profile
from gateway.routing.adaptive import AdaptivePolicy
from gateway.routing.classes.registry import CLASSES
from gateway.routing.classes.latency import queue_budget_s
from gateway.routing.prior import prior_curve
from gateway.types import PoolName, SlaClass
from gateway.types import reasons as r
from gateway.types.decision import Action
from gateway.types.view import LoadView, RequestInfo, WorkerLoad
from tests.unit.routing.fakes import HT, LL, req, thresholds

LL_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_low_latency"))
HT_CURVE = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_high_throughput"))
ROUTE, WAIT, REJECT = Action.ROUTE, Action.WAIT, Action.REJECT


def ll(worker_id: str = "ll-a", load: int = 0, routable: bool = True) -> WorkerLoad:
    return WorkerLoad(worker_id, LL, routable, load, None, 16, LL_CURVE)


def ht(worker_id: str = "ht-a", load: int = 0, routable: bool = True) -> WorkerLoad:
    return WorkerLoad(worker_id, HT, routable, load, None, 64, HT_CURVE)


def sentence(deadline_s: float) -> RequestInfo:
    """A later sentence of a voice session, due in ``deadline_s`` seconds."""
    return replace(req(), deadline_s=deadline_s)


def pinned(request: RequestInfo, pool: PoolName) -> RequestInfo:
    return replace(request, pool_pin=pool)


def retry(request: RequestInfo, *tried: str) -> RequestInfo:
    return replace(request, waited_out=True, tried=frozenset(tried))


@dataclass
class Case:
    id: str
    request: RequestInfo
    workers: tuple[WorkerLoad, ...]
    expect: tuple[Action, str, str | None]
    knobs: dict[str, Any] = field(default_factory=dict)


CASES = [
    # --- latency ---------------------------------------------------------------------------
    Case("latency/fastest low-latency", req("latency"), (ll("ll-a", 3), ll("ll-b", 1), ht()), (ROUTE, r.FASTEST_TTFP, "ll-b")),
    Case("latency/ignores the rtf ceiling on low-latency", req("latency"), (ll(load=15), ht()), (ROUTE, r.FASTEST_TTFP, "ll-a"), {"balanced_rtf_ceiling": 0.1}),
    Case("latency/uses the reserve", req("latency"), (ll(load=14), ht(load=64)), (ROUTE, r.FASTEST_TTFP, "ll-a")),
    Case("latency/waits within its budget", req("latency"), (ll(load=16), ht()), (WAIT, r.QUEUED_LL_FULL, None)),
    Case("latency/spills once the budget is spent", req("latency", waited_out=True), (ll(load=16), ht()), (ROUTE, r.SPILL_LL_FULL, "ht-a")),
    Case("latency/spill obeys the balanced ceiling", req("latency", waited_out=True), (ll(load=16), ht(load=40)), (WAIT, r.QUEUED_ALL_FULL, None), {"balanced_rtf_ceiling": 0.3}),
    Case("latency/no low-latency: straight to high-throughput", req("latency"), (ll(routable=False), ht()), (ROUTE, r.NO_LL_WORKERS, "ht-a")),
    Case("latency/retry: next low-latency first", retry(req("latency"), "ll-a"), (ll("ll-a"), ll("ll-b", 5), ht()), (ROUTE, r.FASTEST_TTFP, "ll-b")),
    Case("latency/retry: spills when low-latency is tried out", retry(req("latency"), "ll-a"), (ll("ll-a"), ht()), (ROUTE, r.SPILL_LL_FULL, "ht-a")),
    # --- balanced --------------------------------------------------------------------------
    Case("balanced/idle fleet: low-latency", req(), (ll(), ht()), (ROUTE, r.FASTEST_FINISH, "ll-a")),
    Case("balanced/busy low-latency: high-throughput", req(), (ll(load=12), ht()), (ROUTE, r.FASTEST_FINISH, "ht-a")),
    Case("balanced/leaves the reserve", req(), (ll(load=14), ht(load=64)), (WAIT, r.QUEUED_LL_RESERVED, None)),
    Case("balanced/no reserve: takes it", req(), (ll(load=14), ht(load=64)), (ROUTE, r.FASTEST_FINISH, "ll-a"), {"reserve_for_latency": 0}),
    Case("balanced/ceiling: waits", req(), (ll(load=15), ht(load=60)), (WAIT, r.QUEUED_ALL_FULL, None), {"balanced_rtf_ceiling": 0.3, "reserve_for_latency": 0}),
    Case("balanced/no high-throughput", req(), (ll(load=3), ht(routable=False)), (ROUTE, r.NO_HT_WORKERS, "ll-a")),
    Case("balanced/retry keeps the reserve", retry(req(), "ht-a"), (ll(load=14), ht()), (WAIT, r.QUEUED_LL_RESERVED, None)),
    # --- throughput ------------------------------------------------------------------------
    Case("throughput/most audio added", req("throughput"), (ll(load=8), ht(load=8)), (ROUTE, r.MOST_THROUGHPUT, "ht-a")),
    Case("throughput/leaves latency-grade room", req("throughput"), (ll(load=6), ht(load=64)), (WAIT, r.QUEUED_LL_RESERVED, None)),
    Case("throughput/no high-throughput: low-latency", req("throughput"), (ll(load=6), ht(routable=False)), (ROUTE, r.NO_HT_WORKERS, "ll-a")),
    Case("throughput/retry keeps latency-grade room", retry(req("throughput"), "ht-a"), (ll(load=6), ht()), (WAIT, r.QUEUED_LL_RESERVED, None)),
    # --- deadline (a voice session's later sentence) -------------------------------------------
    Case("deadline/idle fleet: high-throughput, low-latency kept for first sentences", sentence(2.0), (ll(), ht()), (ROUTE, r.DEADLINE_MET, "ht-a")),
    Case("deadline/the least loaded of those that meet it", sentence(2.0), (ll(), ht("ht-a", 40), ht("ht-b", 8)), (ROUTE, r.DEADLINE_MET, "ht-b")),
    Case("deadline/high-throughput too slow to start: low-latency", sentence(0.3), (ll(load=2), ht(load=40)), (ROUTE, r.DEADLINE_MET, "ll-a")),
    Case("deadline/low-latency only outside its reserve", sentence(0.3), (ll(load=14), ht(load=40)), (ROUTE, r.DEADLINE_MISSED, "ll-a")),
    Case("deadline/already late: the earliest start anywhere", sentence(-0.5), (ll(), ht(load=8)), (ROUTE, r.DEADLINE_MISSED, "ll-a")),
    Case("deadline/everything full: waits", sentence(1.0), (ll(load=16), ht(load=64)), (WAIT, r.QUEUED_ALL_FULL, None)),
    Case("deadline/no high-throughput", sentence(2.0), (ll(load=3), ht(routable=False)), (ROUTE, r.DEADLINE_MET, "ll-a")),
    # --- pinned (x-gateway-pin-pool, where allowed): that pool only, whatever the class ------
    Case("pinned/throughput to high-throughput on an idle fleet", pinned(req("throughput"), HT), (ll(), ht()), (ROUTE, r.PINNED_POOL, "ht-a")),
    Case("pinned/latency to low-latency, the fastest there", pinned(req("latency"), LL), (ll("ll-a", 3), ll("ll-b", 1), ht()), (ROUTE, r.PINNED_POOL, "ll-b")),
    Case("pinned/its pool full: waits, never spills", pinned(req("latency", waited_out=True), LL), (ll(load=16), ht()), (WAIT, r.QUEUED_ALL_FULL, None)),
    Case("pinned/the other pool gone: no degraded reason", pinned(req(), HT), (ll(routable=False), ht()), (ROUTE, r.PINNED_POOL, "ht-a")),
    Case("pinned/its own pool gone: by class, saying why", pinned(req("throughput"), HT), (ll(), ht(routable=False)), (ROUTE, r.NO_HT_WORKERS, "ll-a")),
    Case("throughput/retry with nothing untried", retry(req("throughput"), "ll-a", "ht-a"), (ll(), ht()), (REJECT, r.NO_WORKERS, None)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_class_decides(case: Case) -> None:
    decision = AdaptivePolicy().decide(case.request, LoadView(case.workers), thresholds(**case.knobs))
    assert (decision.action, decision.reason, decision.worker_id) == case.expect
    if decision.action is ROUTE:
        assert decision.worker_id not in case.request.tried


def test_every_adaptive_reason_is_covered() -> None:
    reasons = {r.FASTEST_TTFP, r.FASTEST_FINISH, r.MOST_THROUGHPUT, r.SPILL_LL_FULL, r.NO_LL_WORKERS, r.NO_HT_WORKERS, *r.WAIT_REASONS, r.NO_WORKERS}
    assert reasons <= {c.expect[1] for c in CASES}


def test_each_class_declares_its_queue_rules() -> None:
    knobs = thresholds(latency_queue_budget_ms=150)
    assert CLASSES[SlaClass.LATENCY].spill_after_s(req("latency"), knobs) == pytest.approx(0.15)
    assert CLASSES[SlaClass.LATENCY].spill_after_s is queue_budget_s
    assert CLASSES[SlaClass.BALANCED].spill_after_s(req(), knobs) is None
    assert CLASSES[SlaClass.THROUGHPUT].promoted_to is SlaClass.BALANCED
    assert CLASSES[SlaClass.LATENCY].promoted_to is CLASSES[SlaClass.BALANCED].promoted_to is None
