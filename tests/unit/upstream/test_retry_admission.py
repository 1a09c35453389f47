"""Retries go through admission: a slot handed to a queued request is never handed out again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.types import PoolName, SlaClass
from gateway.types.view import RequestInfo
from tests.unit.upstream.fakes import ready_fleet

LATENCY = RequestInfo(SlaClass.LATENCY, None, 10)
THROUGHPUT = RequestInfo(SlaClass.THROUGHPUT, None, 10)


async def test_a_retry_cannot_take_the_slot_just_handed_to_a_waiter(tmp_path: Path) -> None:
    fleet, admission = ready_fleet(tmp_path, slots=1)
    # Every slot busy: ll-0 carries the request that will fail, ll-1 and ht-0 one each.
    failing = fleet.leases.lease("ll-0")
    finishing = fleet.leases.lease("ll-1")
    fleet.leases.lease("ht-0")
    waiter = asyncio.ensure_future(admission.admit(LATENCY))
    await asyncio.sleep(0)
    assert admission.queue_depths()[SlaClass.LATENCY] == 1

    # ll-1's request ends: admission hands its slot to the waiter, whose task has not run yet.
    finishing.release()
    assert waiter.done() is False and fleet.members.get("ll-1").inflight == 0
    # In the same instant the request on ll-0 fails before its first byte and asks to retry.
    failing.release()
    assert admission.retry(LATENCY, {"ll-0"}, PoolName.LOW_LATENCY) is None  # ll-1 is the waiter's

    decision = await waiter
    assert decision.worker_id == "ll-1"
    fleet.leases.lease("ll-1")  # what the waiter's relay does, before its next await
    assert {w.worker_id: w.inflight for w in fleet.view.workers} == {"ll-0": 0, "ll-1": 1, "ht-0": 1}


async def test_a_retry_prefers_the_requests_own_pool_then_the_least_loaded(tmp_path: Path) -> None:
    fleet, admission = ready_fleet(tmp_path)
    fleet.leases.lease("ll-1")
    decision = admission.retry(THROUGHPUT, {"ll-0"}, PoolName.LOW_LATENCY)
    assert decision is not None and (decision.worker_id, decision.reason) == ("ll-1", "retry_other_worker")
    decision = admission.retry(THROUGHPUT, {"ll-0", "ll-1"}, PoolName.LOW_LATENCY)
    assert decision is not None and decision.worker_id == "ht-0"


async def test_no_retry_once_the_gateway_is_shutting_down(tmp_path: Path) -> None:
    fleet, admission = ready_fleet(tmp_path)
    admission.close()
    assert admission.retry(THROUGHPUT, {"ll-0"}, PoolName.LOW_LATENCY) is None
