"""Admission with a fleet view shared by replicas: a slot refused fleet-wide is chosen again, once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.config import AdmissionConfig
from gateway.routing.admission import Admission
from gateway.routing.policy import create_policy
from tests.unit.routing.fakes import FakeClock, FakeFleet, FakeSlot, ll, req, thresholds


def make(fleet: FakeFleet, confirm: Any) -> Admission:
    return Admission(
        AdmissionConfig(),
        create_policy("rules"),  # type: ignore[arg-type]
        lambda: thresholds(reserve_for_latency=0),
        fleet.snapshot,
        fleet.reserve,
        fleet.any_routable,
        clock=FakeClock(),
        confirm=confirm,
    )


async def test_a_slot_another_replica_took_first_is_chosen_again_on_the_exact_view() -> None:
    fleet = FakeFleet.of(ll("ll-a", slots=1), ll("ll-b", slots=1))
    asked: list[str] = []

    async def confirm(slot: FakeSlot) -> bool:
        asked.append(slot.worker_id)
        if slot.worker_id == "ll-a":
            # The shared view answers with ll-a's leases: another replica holds its one slot.
            fleet.set("ll-a", reported=1)
            return False
        return True

    reservation = await make(fleet, confirm).admit(req("latency"))
    assert asked == ["ll-a"]  # the re-decision, made on the exact view, stands without asking
    assert reservation.worker_id == "ll-b"
    assert fleet.inflight("ll-a") == 0 and fleet.released == 1  # the refused slot went back


async def test_refused_everywhere_the_request_waits_for_a_slot_to_come_free() -> None:
    fleet = FakeFleet.of(ll("ll-a", slots=1))
    admission = make(fleet, None)

    async def confirm(slot: FakeSlot) -> bool:
        if fleet.taken == 1:
            fleet.set("ll-a", reported=1)  # the other replica's lease, now in the view
            return False
        return True

    admission._confirm = confirm
    task = asyncio.ensure_future(admission.admit(req("latency")))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not task.done() and admission.queue_depths()["latency"] == 1
    fleet.set("ll-a", reported=None)  # the other replica released it
    admission.capacity_changed()
    reservation = await task
    assert reservation.worker_id == "ll-a" and fleet.taken == 2


async def test_cancelled_while_confirming_gives_the_slot_back() -> None:
    fleet = FakeFleet.of(ll("ll-a", slots=1))
    answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def confirm(slot: FakeSlot) -> bool:
        return await answer

    task = asyncio.ensure_future(make(fleet, confirm).admit(req("latency")))
    for _ in range(5):
        await asyncio.sleep(0)
    assert fleet.inflight("ll-a") == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fleet.inflight("ll-a") == 0 and fleet.released == 1


async def test_a_policy_that_picks_the_refused_worker_again_keeps_it() -> None:
    fleet = FakeFleet.of(ll("ll-a", slots=4))
    asked: list[str] = []

    async def confirm(slot: FakeSlot) -> bool:
        asked.append(slot.worker_id)
        return False  # the view does not make it full: the policy would pick it forever

    reservation = await make(fleet, confirm).admit(req("latency"))
    assert reservation.worker_id == "ll-a" and asked == ["ll-a"]


async def test_a_request_is_decided_again_once_at_most() -> None:
    """Every answer stale (a burst on every replica): one re-decision, which stands."""
    fleet = FakeFleet.of(*(ll(f"ll-{n}", slots=1) for n in "abcd"))
    asked: list[str] = []

    async def confirm(slot: FakeSlot) -> bool:
        asked.append(slot.worker_id)
        fleet.set(slot.worker_id, reported=1)  # another replica's lease there, counted now
        return False

    reservation = await make(fleet, confirm).admit(req("latency"))
    assert asked == ["ll-a"] and reservation.worker_id == "ll-b"
    assert fleet.released == 1
