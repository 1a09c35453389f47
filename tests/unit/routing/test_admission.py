"""Admission with a fake clock and a fake fleet: order, promotion, limits, cancellation, leases."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.config import AdmissionConfig
from gateway.routing.admission import Admission, AdmissionRejected
from gateway.routing.policy import create_policy
from gateway.types import reasons as r
from gateway.types.decision import Decision
from gateway.types.view import RequestInfo
from tests.unit.routing.fakes import FakeClock, FakeFleet, ht, ll, req, thresholds
from tests.support.deadline import within


def make(fleet: FakeFleet, clock: Any = None, knobs: dict | None = None, policy: str = "rules", **config: Any) -> Admission:
    return Admission(
        AdmissionConfig(**config),
        create_policy(policy),  # type: ignore[arg-type]
        lambda: thresholds(**(knobs or {})),
        fleet.snapshot,
        fleet.reserve,
        fleet.any_routable,
        clock=clock or FakeClock(),
    )


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def client(admission: Admission, fleet: FakeFleet, request: RequestInfo, served: list) -> asyncio.Task[Decision]:
    async def run() -> Decision:
        reservation = await admission.admit(request)
        decision = reservation.decision
        # The slot is already held: nothing to take, whatever ran before this line.
        assert fleet.inflight(reservation.worker_id) >= 1
        served.append((request.sla_class.value, decision.worker_id, decision.reason, request.ttfp_budget_ms))
        return decision

    return asyncio.ensure_future(run())


def one_slot_fleet() -> FakeFleet:
    """Every class wants the same single low-latency slot (no ht workers, no reserve)."""
    return FakeFleet.of(ll("ll-a", load=1, slots=1))


async def free_one(admission: Admission, fleet: FakeFleet, worker_id: str = "ll-a") -> None:
    fleet.release(worker_id)
    admission.capacity_changed()
    await settle()


async def test_fast_path_returns_without_suspending() -> None:
    fleet = FakeFleet.of(ll("ll-a"), ht("ht-a"))
    admission = make(fleet)
    coro = admission.admit(req("latency"))
    with pytest.raises(StopIteration) as done:
        coro.send(None)
    reservation = done.value.value
    decision = reservation.decision
    assert (decision.worker_id, decision.reason) == ("ll-a", r.LL_SLOT_FREE)
    assert fleet.inflight("ll-a") == 1 and fleet.taken == 1  # held before admit returned
    assert reservation.waited_s == 0.0  # the fast path never queues
    assert admission.queue_depths() == {sla: 0 for sla in admission.queue_depths()}


async def test_serves_latency_then_balanced_then_throughput_fifo_within_class() -> None:
    fleet = one_slot_fleet()
    admission = make(fleet, knobs={"reserve_for_latency": 0})
    served: list = []
    arrivals = ["throughput", "balanced", "latency", "balanced", "latency"]
    tasks = [client(admission, fleet, req(sla, ttfp_ms=10_000 + i), served) for i, sla in enumerate(arrivals)]
    await settle()
    assert admission.queue_depths() == {"latency": 2, "balanced": 2, "throughput": 1}
    for _ in arrivals:
        await free_one(admission, fleet)
    await asyncio.gather(*tasks)
    # Latency, balanced, throughput; first come first served within a class (ttfp tags arrival).
    assert [(sla, tag) for sla, _, _, tag in served] == [
        ("latency", 10_002), ("latency", 10_004), ("balanced", 10_001), ("balanced", 10_003), ("throughput", 10_000),
    ]  # fmt: skip
    assert served[0][2] == r.LL_SLOT_FREE and served[-1][2] == r.NO_HT_WORKERS
    assert admission.queue_depths() == {"latency": 0, "balanced": 0, "throughput": 0}
    assert len(served) == len(arrivals)


@pytest.mark.parametrize(("queued_for_s", "first"), [(4.9, "balanced"), (5.0, "throughput")])
async def test_throughput_promoted_after_promote_after_s(queued_for_s: float, first: str) -> None:
    fleet, clock = one_slot_fleet(), FakeClock()
    admission = make(fleet, clock, knobs={"reserve_for_latency": 0}, promote_after_s=5.0)
    served: list = []
    tasks = [client(admission, fleet, req("throughput"), served)]
    await settle()
    clock.advance(1.0)
    tasks.append(client(admission, fleet, req("balanced"), served))
    await settle()
    clock.advance(queued_for_s - 1.0)
    await free_one(admission, fleet)
    assert [s[0] for s in served] == [first]
    await free_one(admission, fleet)
    await asyncio.gather(*tasks)


async def test_queue_full_is_429() -> None:
    fleet = one_slot_fleet()
    admission = make(fleet, queue_size={"latency": 1}, retry_after_s=3)
    waiting = client(admission, fleet, req("latency"), [])
    await settle()
    with pytest.raises(AdmissionRejected) as rejected:
        await admission.admit(req("latency"))
    assert (rejected.value.status, rejected.value.reason, rejected.value.retry_after_s) == (429, r.QUEUE_FULL, 3)
    assert (rejected.value.sla_class, rejected.value.waited_s) == ("latency", None)  # refused on arrival
    waiting.cancel()
    await settle()


async def test_no_slot_in_time_is_503_wait_timeout() -> None:
    fleet, clock = FakeFleet.of(ll("ll-a", load=4), ht("ht-a", load=64)), FakeClock()
    admission = make(fleet, clock)
    task = client(admission, fleet, req("balanced"), [])
    await settle()
    clock.advance(29.9)
    admission.capacity_changed()
    await settle()
    assert not task.done()
    clock.advance(0.1)
    admission.capacity_changed()
    await settle()
    with pytest.raises(AdmissionRejected) as rejected:
        task.result()
    assert (rejected.value.status, rejected.value.reason) == (503, r.WAIT_TIMEOUT)
    assert admission.queue_depths()["balanced"] == 0
    assert rejected.value.waited_s == pytest.approx(30.0)  # the refusal carries its wait to the recorder


async def test_latency_spills_once_its_ttfp_budget_is_spent() -> None:
    fleet, clock = FakeFleet.of(ll("ll-a", load=4), ht("ht-a")), FakeClock()
    admission = make(fleet, clock)
    task = client(admission, fleet, req("latency", ttfp_ms=1000), [])  # 50% of 1 s may queue
    await settle()
    clock.advance(0.4)
    admission.capacity_changed()
    await settle()
    assert not task.done()
    clock.advance(0.1)
    admission.capacity_changed()
    await settle()
    assert (task.result().worker_id, task.result().reason) == ("ht-a", r.SPILL_LL_FULL)


async def test_latency_spills_on_its_own_timer() -> None:
    """No capacity change at all: the waiter wakes itself when its budget is spent (real clock)."""
    fleet = FakeFleet.of(ll("ll-a", load=4), ht("ht-a"))
    admission = make(fleet, clock=asyncio.get_running_loop().time, knobs={"latency_queue_budget_ms": 5})
    reservation = await within(10, admission.admit(req("latency")))
    assert reservation.decision.reason == r.SPILL_LL_FULL


async def test_latency_with_zero_budget_spills_at_once() -> None:
    fleet = FakeFleet.of(ll("ll-a", load=4), ht("ht-a"))
    admission = make(fleet)
    reservation = await admission.admit(req("latency", ttfp_ms=0))
    assert reservation.decision.reason == r.SPILL_LL_FULL


async def test_latency_keeps_waiting_after_budget_until_deadline() -> None:
    fleet, clock = FakeFleet.of(ll("ll-a", load=4), ht("ht-a", load=64)), FakeClock()
    admission = make(fleet, clock)
    task = client(admission, fleet, req("latency"), [])
    await settle()
    clock.advance(1.0)  # budget (150 ms) spent, still nothing free
    admission.capacity_changed()
    await settle()
    assert not task.done()
    clock.advance(1.0)  # max_wait_s latency = 2
    admission.capacity_changed()
    await settle()
    assert task.exception().reason == r.WAIT_TIMEOUT  # type: ignore[union-attr]


async def test_no_workers_at_the_door_is_503() -> None:
    admission = make(FakeFleet.of(ll("ll-a", routable=False)))
    with pytest.raises(AdmissionRejected) as rejected:
        await admission.admit(req())
    assert (rejected.value.status, rejected.value.reason) == (503, r.NO_WORKERS)
    assert rejected.value.sla_class == "balanced"


async def test_queued_requests_rejected_when_every_worker_goes() -> None:
    fleet = one_slot_fleet()
    admission = make(fleet)
    task = client(admission, fleet, req(), [])
    await settle()
    fleet.set("ll-a", routable=False)
    admission.capacity_changed()
    await settle()
    assert task.exception().reason == r.NO_WORKERS  # type: ignore[union-attr]


async def test_cancelled_waiter_leaves_no_trace() -> None:
    fleet = one_slot_fleet()
    admission = make(fleet)
    task = client(admission, fleet, req("throughput"), [])
    await settle()
    assert admission.queue_depths()["throughput"] == 1
    task.cancel()
    await settle()
    assert task.cancelled()
    assert admission.queue_depths()["throughput"] == 0
    await free_one(admission, fleet)
    assert fleet.inflight("ll-a") == 0  # nobody took the freed slot


async def test_slot_handed_to_a_cancelled_waiter_goes_to_the_next() -> None:
    fleet = one_slot_fleet()
    admission = make(fleet)
    served: list = []
    first = client(admission, fleet, req(), served)
    await settle()
    second = client(admission, fleet, req(), served)
    await settle()
    fleet.release("ll-a")
    admission.capacity_changed()  # hands the slot to `first`...
    first.cancel()  # ...which disconnects before it can lease it
    await settle()
    assert first.cancelled()
    assert second.done() and second.result().worker_id == "ll-a"
    assert fleet.inflight("ll-a") == 1
    assert (fleet.taken, fleet.released) == (2, 1)  # first's slot released once, by admission
    assert admission.queue_depths()["balanced"] == 0


async def test_one_free_slot_is_never_handed_out_twice() -> None:
    fleet = one_slot_fleet()
    admission = make(fleet)
    served: list = []
    tasks = [client(admission, fleet, req(), served) for _ in range(2)]
    await settle()
    fleet.release("ll-a")
    admission.capacity_changed()
    admission.capacity_changed()  # again, before the winner has leased
    assert sum(t.done() for t in tasks) == 0  # nobody has run yet...
    assert admission.queue_depths()["balanced"] == 1  # ...but only one waiter was served
    await settle()
    assert len(served) == 1 and fleet.inflight("ll-a") == 1
    tasks[1].cancel()
    await settle()


async def test_fresh_request_cannot_take_a_slot_already_handed_out() -> None:
    fleet = one_slot_fleet()
    admission = make(fleet)
    served: list = []
    _waiting = client(admission, fleet, req(), served)  # held: the queued request under test
    await settle()
    fleet.release("ll-a")
    admission.capacity_changed()  # handed to `waiting`; the queue is now empty
    fresh = admission.admit(req())
    fresh.send(None)  # no StopIteration: it queued instead of taking the fast path
    assert admission.queue_depths()["balanced"] == 1
    with pytest.raises(asyncio.CancelledError):
        fresh.throw(asyncio.CancelledError())
    await settle()
    assert served == [("balanced", "ll-a", r.NO_HT_WORKERS, None)]
    assert admission.queue_depths()["balanced"] == 0


async def test_close_rejects_waiters_and_newcomers() -> None:
    fleet = one_slot_fleet()
    admission = make(fleet)
    tasks = [client(admission, fleet, req(sla), []) for sla in ("latency", "throughput")]
    await settle()
    admission.close()
    await settle()
    assert [t.exception().reason for t in tasks] == [r.SHUTTING_DOWN] * 2  # type: ignore[union-attr]
    with pytest.raises(AdmissionRejected) as rejected:
        await admission.admit(req())
    assert (rejected.value.status, rejected.value.reason) == (503, r.SHUTTING_DOWN)
    assert admission.queue_depths() == {"latency": 0, "balanced": 0, "throughput": 0}


async def test_set_policy_reevaluates_waiters() -> None:
    fleet = FakeFleet.of(ll("ll-a", load=4), ht("ht-a"))
    admission = make(fleet)
    task = client(admission, fleet, req("latency"), [])
    await settle()
    assert not task.done()
    admission.set_policy(create_policy("high_throughput_only"))
    await settle()
    assert (task.result().worker_id, task.result().reason) == ("ht-a", r.HIGH_THROUGHPUT_ONLY)


async def test_admission_returns_the_slot_held_and_its_owner_releases_it_once() -> None:
    """Fast path and queue alike: the answer is a Reservation whose slot is already counted;
    every slot taken is released exactly once (the fake fails on a second release)."""
    from gateway.types.reservation import Reservation

    fleet = FakeFleet.of(ll("ll-a", slots=1), ht("ht-a", slots=1))
    admission = make(fleet, knobs={"reserve_for_latency": 0})
    first = await admission.admit(req())
    assert isinstance(first, Reservation) and fleet.inflight(first.worker_id) == 1
    second = await admission.admit(req())
    assert {first.worker_id, second.worker_id} == {"ll-a", "ht-a"}
    queued = asyncio.ensure_future(admission.admit(req()))
    await settle()
    assert not queued.done()
    first.release()  # its owner is done with it: the waiter gets the slot, held at once
    admission.capacity_changed()
    assert fleet.inflight(first.worker_id) == 1 and fleet.taken == 3
    third = await queued
    assert third.worker_id == first.worker_id
    second.release()
    third.release()
    assert fleet.taken == fleet.released == 3
    assert all(w.inflight == 0 for w in fleet.workers.values())


async def test_a_served_waiter_carries_its_wait_in_the_reservation() -> None:
    fleet, clock = one_slot_fleet(), FakeClock()
    admission = make(fleet, clock)
    task = asyncio.ensure_future(admission.admit(req()))
    await settle()
    clock.advance(0.5)
    await free_one(admission, fleet)
    reservation = await task
    assert reservation.waited_s == pytest.approx(0.5)
    reservation.release()


async def test_arrivals_are_counted_before_the_policy_answers_admitted_or_refused() -> None:
    fleet = FakeFleet.of(ll("ll-a", slots=1))
    admission = make(fleet, queue_size={"latency": 0})
    counted: list[str] = []
    admission.count_arrivals(lambda request: counted.append(request.sla_class.value))
    held = await admission.admit(req("balanced"))
    with pytest.raises(AdmissionRejected):  # the one slot held, no latency queue: refused
        await admission.admit(req("latency"))
    held.release()
    assert counted == ["balanced", "latency"]
