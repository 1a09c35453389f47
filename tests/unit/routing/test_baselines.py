"""Baseline policies behind the same interface: each routes naively and still waits when full."""

from __future__ import annotations

from typing import get_args

import pytest

from gateway.config import PolicyName
from gateway.routing.policy import create_policy
from gateway.types import reasons as r
from gateway.types.decision import Action
from gateway.types.view import LoadView
from tests.unit.routing.fakes import ht, ll, req, thresholds, view

ROUTE, WAIT, REJECT = Action.ROUTE, Action.WAIT, Action.REJECT

CASES = [
    # policy, view, expected (action, reason, worker)
    ("low_latency_only", view(ll("ll-a", 2), ll("ll-b", 1), ht("ht-a")), (ROUTE, r.LOW_LATENCY_ONLY, "ll-b")),
    ("low_latency_only", view(ll("ll-a", 4), ht("ht-a")), (WAIT, r.QUEUED_ALL_FULL, None)),
    ("low_latency_only", view(ll("ll-a", routable=False), ht("ht-a")), (REJECT, r.NO_WORKERS, None)),
    ("high_throughput_only", view(ll("ll-a"), ht("ht-a", 5), ht("ht-b", 2)), (ROUTE, r.HIGH_THROUGHPUT_ONLY, "ht-b")),
    ("high_throughput_only", view(ll("ll-a"), ht("ht-a", 64)), (WAIT, r.QUEUED_ALL_FULL, None)),
    ("high_throughput_only", view(ll("ll-a")), (REJECT, r.NO_WORKERS, None)),
    ("round_robin", view(ll("ll-a", 3), ht("ht-a", 0)), (ROUTE, r.ROUND_ROBIN, "ll-a")),  # load ignored
    ("round_robin", view(ll("ll-a", 4), ht("ht-a", 0)), (ROUTE, r.ROUND_ROBIN, "ht-a")),  # except full
    ("round_robin", view(ll("ll-a", 4), ht("ht-a", 64)), (WAIT, r.QUEUED_ALL_FULL, None)),
    ("round_robin", view(ll("ll-a", routable=False)), (REJECT, r.NO_WORKERS, None)),
    ("least_loaded", view(ll("ll-a", 1), ht("ht-a", 10)), (ROUTE, r.LEAST_LOADED, "ht-a")),  # 54 free > 3 free
    ("least_loaded", view(ll("ll-a", 0), ht("ht-a", 61)), (ROUTE, r.LEAST_LOADED, "ll-a")),  # 4 free > 3 free
    ("least_loaded", view(ll("ll-a", 0), ht("ht-a", 0, routable=False)), (ROUTE, r.LEAST_LOADED, "ll-a")),
    ("least_loaded", view(ll("ll-a", 4), ht("ht-a", 64)), (WAIT, r.QUEUED_ALL_FULL, None)),
    ("least_loaded", view(), (REJECT, r.NO_WORKERS, None)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "load_view", "expect"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("sla", ["latency", "balanced", "throughput"])
def test_baseline_ignores_sla_class(name: PolicyName, load_view: LoadView, expect: tuple, sla: str) -> None:
    decision = create_policy(name).decide(req(sla), load_view, thresholds())
    assert (decision.action, decision.reason, decision.worker_id) == expect


def test_round_robin_alternates_pools_then_workers() -> None:
    policy, knobs = create_policy("round_robin"), thresholds()
    fleet = view(ll("ll-a"), ll("ll-b"), ht("ht-a"), ht("ht-b"))
    picked = []
    for _ in range(5):
        decision = policy.decide(req(), fleet, knobs)
        picked.append(decision.worker_id)
    assert picked == ["ll-a", "ht-a", "ll-b", "ht-b", "ll-a"]


def test_least_loaded_ties_rotate_across_pools() -> None:
    policy, knobs = create_policy("least_loaded"), thresholds()
    fleet = view(ll("ll-a", 0, slots=4), ht("ht-a", 60))
    picked = []
    for _ in range(3):
        decision = policy.decide(req(), fleet, knobs)
        picked.append(decision.worker_id)
    assert picked == ["ht-a", "ll-a", "ht-a"]


@pytest.mark.parametrize("name", get_args(PolicyName))
def test_create_policy_knows_every_configurable_name(name: PolicyName) -> None:
    assert create_policy(name).name == name


def test_create_policy_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="unknown routing policy"):
        create_policy("fastest")  # type: ignore[arg-type]
