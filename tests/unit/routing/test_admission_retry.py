"""Retries go through admission and the policy: a slot handed to a queued request is never
handed out again, and a retry obeys its class's caps, ceilings and the latency reserve."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.types import SlaClass
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
    # ...and holds it for the waiter the moment it chooses it (the task has not run yet).
    assert waiter.done() is False and fleet.members.get("ll-1").inflight == 1
    # In the same instant the request on ll-0 fails before its first byte and asks to retry.
    failing.release()
    assert admission.retry(LATENCY, {"ll-0"}) is None  # ll-1 is the waiter's

    reservation = await waiter
    assert reservation.worker_id == "ll-1" and reservation.slot.worker.worker_id == "ll-1"
    assert {w.worker_id: w.inflight for w in fleet.view.workers} == {"ll-0": 0, "ll-1": 1, "ht-0": 1}


async def test_a_retry_is_placed_by_its_class_and_never_on_a_tried_worker(tmp_path: Path) -> None:
    fleet, admission = ready_fleet(tmp_path)
    # latency: the fastest untried low-latency worker, the slot held on return.
    retry = admission.retry(LATENCY, {"ll-0"})
    assert retry is not None and (retry.worker_id, retry.decision.reason) == ("ll-1", "retry_other_worker")
    assert fleet.members.get("ll-1").inflight == 1
    # Every low-latency worker tried: a latency retry has waited already, so it spills.
    retry = admission.retry(LATENCY, {"ll-0", "ll-1"})
    assert retry is not None and retry.worker_id == "ht-0"
    assert admission.retry(LATENCY, {"ll-0", "ll-1", "ht-0"}) is None


async def test_a_throughput_retry_leaves_the_latency_reserve(tmp_path: Path) -> None:
    """The reserve holds for retries too: a batch retry cannot take low-latency's last places.

    Pinned at ``reserve_for_latency`` (2): left to follow the demand, no `latency` traffic
    seen yet would leave no reserve at all."""
    fleet, admission = ready_fleet(tmp_path, routing={"thresholds": {"adaptive_latency_reserve": False}})
    ht_slots = fleet.members.get("ht-0").slots
    held = [fleet.leases.lease("ht-0") for _ in range(ht_slots)]  # high-throughput full
    ll_slots = fleet.members.get("ll-1").slots
    held += [fleet.leases.lease("ll-1") for _ in range(ll_slots - 2)]  # ll-1 down to its reserve (2)
    assert admission.retry(THROUGHPUT, {"ll-0"}) is None  # only reserved places left
    retry = admission.retry(LATENCY, {"ll-0"})  # latency may use them
    assert retry is not None and retry.worker_id == "ll-1"
    retry.release()
    for lease in held:
        lease.release()


async def test_no_retry_once_the_gateway_is_shutting_down(tmp_path: Path) -> None:
    fleet, admission = ready_fleet(tmp_path)
    admission.close()
    assert admission.retry(THROUGHPUT, {"ll-0"}) is None
