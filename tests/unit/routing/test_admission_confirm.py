"""Admission with a fleet view shared by replicas: a slot refused fleet-wide is chosen again,
until the fleet agrees or the request waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.config import AdmissionConfig
from gateway.routing.admission import MAX_REDECISIONS, Admission, AdmissionRejected
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
    assert asked == ["ll-a", "ll-b"]  # decided again on the exact view, and asked again
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
    # Asked MAX_REDECISIONS times, then the last decision stands as it is.
    assert reservation.worker_id == "ll-a" and asked == ["ll-a"] * MAX_REDECISIONS


async def test_a_request_no_decision_of_which_stands_waits_instead_of_going_over_the_cap() -> None:
    """Every answer stale (a burst on every replica): each refusal fills that worker in the
    view; with every worker full the request waits, rather than go to a worker the fleet
    said was full (there it would wait inside the worker, in no replica's view)."""
    fleet = FakeFleet.of(*(ll(f"ll-{n}", slots=1) for n in "abc"))
    asked: list[str] = []

    async def confirm(slot: FakeSlot) -> bool:
        asked.append(slot.worker_id)
        if len(asked) <= 3:
            fleet.set(slot.worker_id, reported=1)  # another replica's lease there, counted now
            return False
        return True

    admission = make(fleet, confirm)
    task = asyncio.ensure_future(admission.admit(req("balanced")))
    await _settle()
    assert asked == ["ll-a", "ll-b", "ll-c"] and not task.done()
    assert admission.queue_depths()["balanced"] == 1 and fleet.released == 3
    fleet.set("ll-b", reported=None)  # the other replica's stream there ended
    admission.capacity_changed()
    reservation = await asyncio.wait_for(task, 5)
    assert reservation.worker_id == "ll-b" and asked[-1] == "ll-b"


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_waiter_the_fleet_sends_back_keeps_its_place_ahead_of_later_arrivals() -> None:
    """Re-queued at the back, the request that lost a freed slot to another replica's take
    went behind everyone who arrived after it, every time it lost: a few waited seconds."""
    fleet = FakeFleet.of(ll("ll-a", slots=1, reported=1))  # another replica holds the one slot
    clock = FakeClock()
    refused: list[str] = []

    async def confirm(slot: FakeSlot) -> bool:
        if not refused:
            refused.append(slot.worker_id)
            fleet.set("ll-a", reported=1)  # another replica's take reached the worker first
            return False
        return True

    admission = make(fleet, confirm)
    admission._clock = clock
    first = asyncio.ensure_future(admission.admit(req("balanced")))
    await _settle()
    clock.now += 2.0
    later = asyncio.ensure_future(admission.admit(req("balanced")))
    await _settle()
    assert admission.queue_depths()["balanced"] == 2

    fleet.set("ll-a", reported=None)  # freed: the first waiter is handed it, the fleet says no
    admission.capacity_changed()
    await _settle()
    assert refused == ["ll-a"] and admission.queue_depths()["balanced"] == 2

    clock.now += 1.0
    fleet.set("ll-a", reported=None)  # freed again: still the first waiter's turn
    admission.capacity_changed()
    reservation = await first
    assert not later.done()
    assert reservation.waited_s == 3.0  # counted from its arrival, not from being sent back
    later.cancel()
    with pytest.raises(asyncio.CancelledError):
        await later


async def test_a_latency_request_sent_back_spills_on_the_budget_counted_from_its_arrival() -> None:
    fleet = FakeFleet.of(ll("ll-a", slots=1))
    clock = FakeClock()

    async def confirm(slot: FakeSlot) -> bool:
        clock.now += 10.0  # a slow answer, past any latency queue budget
        fleet.set("ll-a", reported=1)
        return False

    admission = make(fleet, confirm)
    admission._clock = clock
    decided: list[bool] = []
    policy = admission._policy
    original = policy.decide

    def decide(request, view, limits):  # type: ignore[no-untyped-def]
        decided.append(request.waited_out)
        return original(request, view, limits)

    policy.decide = decide  # type: ignore[method-assign]
    with pytest.raises(AdmissionRejected):  # spilled, with nowhere to spill to
        await admission.admit(req("latency"))
    assert decided[0] is False and decided[-1] is True
