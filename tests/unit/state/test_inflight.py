"""The fleet view of in-flight work over a fake store: sharing, double hand-out, expiry,
degradation and rejoining."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from gateway.pools.events import FleetEvents
from gateway.pools.lease import Lease, Leases
from gateway.state.inflight import SharedInflight
from tests.support.deadline import until, within
from tests.unit.state.inflight_fakes import FakeInflightStore, FakeMembers, worker

TTL_S = 3.0


@dataclass
class Replica:
    view: SharedInflight
    leases: Leases
    members: FakeMembers
    freed: list[int] = field(default_factory=list)
    shared_changes: list[bool] = field(default_factory=list)

    def others(self, worker_id: str = "ll-a") -> int | None:
        w = self.members.get(worker_id)
        assert w is not None
        return w.others

    def take(self, worker_id: str = "ll-a") -> Lease:
        return self.leases.lease(worker_id)


async def replica(
    store: FakeInflightStore, slots: int = 1, timeout_s: float = 1.0, heartbeat_timeout_s: float = 1.0
) -> Replica:
    members = FakeMembers(worker("ll-a", slots), worker("ll-b", slots))
    events = FleetEvents()
    shared: list[bool] = []
    view = SharedInflight(
        store,
        members,
        events,
        cap_of=lambda w: w.slots,
        lease_ttl_s=TTL_S,
        timeout_s=timeout_s,
        heartbeat_timeout_s=heartbeat_timeout_s,
        on_shared=shared.append,
        max_backoff_s=0.05,
    )
    leases = Leases(members, events, time.monotonic)  # type: ignore[arg-type]
    leases.share(view)
    r = Replica(view, leases, members, shared_changes=shared)
    events.on_slot_freed(lambda: r.freed.append(1))
    view.start()
    await within(2.0, until(lambda: view.shared, 2.0, "the view shared"))
    return r


async def test_every_replica_sees_every_lease_at_once_and_its_release() -> None:
    store = FakeInflightStore()
    a, b = await replica(store), await replica(store)
    assert a.others() == 0 and b.others() == 0
    lease = a.take()
    assert await lease.confirm()
    assert b.others() == 1 and a.others() == 0  # a counts its own lease in inflight, not twice
    freed_before = len(b.freed)
    lease.release()
    await until(lambda: b.others() == 0, 1.0, "the release seen by b")
    assert len(b.freed) > freed_before  # b's waiters were told a slot came free
    await a.view.stop()
    await b.view.stop()


async def test_a_capped_slot_is_never_handed_out_twice_across_replicas() -> None:
    store = FakeInflightStore()
    a, b = await replica(store), await replica(store)
    store.hold_reserves = asyncio.Event()
    # Both replicas saw ll-a free and took its one slot locally at the same instant.
    first, second = a.take(), b.take()
    answers = asyncio.gather(first.confirm(), second.confirm())
    await asyncio.sleep(0)
    store.hold_reserves.set()
    results = await answers
    assert sorted(results) == [False, True]
    loser = (first, second)[results.index(False)]
    loser_replica = b if loser is second else a
    assert loser_replica.others() == 1  # the answer made the loser's view exact
    loser.release()
    await until(lambda: len(store._live("ll-a")) == 1, 1.0, "the refused lease removed")
    await a.view.stop()
    await b.view.stop()


async def test_many_concurrent_takes_hand_out_exactly_the_slots() -> None:
    store = FakeInflightStore()
    replicas = [await replica(store, slots=3) for _ in range(3)]
    store.hold_reserves = asyncio.Event()
    taken = [r.take() for r in replicas for _ in range(3)]  # 9 local takes for 3 slots
    answers = asyncio.gather(*(lease.confirm() for lease in taken))
    await asyncio.sleep(0)
    store.hold_reserves.set()
    assert sum(await answers) == 3
    for r in replicas:
        await r.view.stop()


async def test_a_dead_replicas_leases_expire_from_every_view_within_the_ttl() -> None:
    store = FakeInflightStore()
    a, b = await replica(store), await replica(store)
    a.take()
    await asyncio.sleep(0)
    assert b.others() == 1
    for task in a.view._loops:  # SIGKILL: no release, no renewal, nothing more from a
        task.cancel()
    store.now += TTL_S - 0.1
    await b.view.heartbeat()
    assert b.others() == 1  # not yet expired: still counted
    store.now += 0.2
    await b.view.heartbeat()
    assert b.others() == 0


async def test_a_replica_that_starts_reads_the_fleets_leases_first() -> None:
    store = FakeInflightStore()
    a = await replica(store)
    a.take()
    await asyncio.sleep(0)
    b = await replica(store)
    assert b.others() == 1
    await a.view.stop()
    await b.view.stop()


async def test_the_store_unreachable_falls_back_to_own_leases_and_rejoins() -> None:
    store = FakeInflightStore()
    a, b = await replica(store), await replica(store)
    store.go_down()
    await until(lambda: not a.view.shared and not b.view.shared, 1.0, "both degraded")
    assert a.others() is None and b.shared_changes == [True, False]  # said once
    reserves = store.reserves
    lease = a.take()
    assert await within(0.01, lease.confirm())  # never waits on a dead store
    assert store.reserves == reserves  # nor even asks it
    store.reachable = True
    await within(2.0, until(lambda: a.view.shared and b.view.shared, 2.0, "both rejoined"))
    # The lease taken while away was written back on rejoining, and b counts it.
    await b.view.heartbeat()
    assert b.others() == 1 and b.shared_changes == [True, False, True]
    await a.view.stop()
    await b.view.stop()


async def test_a_silent_store_never_holds_a_request_and_degrades_the_view() -> None:
    store = FakeInflightStore()
    a = await replica(store, timeout_s=0.02, heartbeat_timeout_s=0.1)
    store.hold_reserves = asyncio.Event()  # never set: the store hangs
    lease = a.take()
    assert await within(0.05, lease.confirm())  # bounded by the request's budget: the slot is kept
    assert a.view.shared  # late so far, not lost
    await until(lambda: not a.view.shared, 1.0, "silent past the store's timeout: degraded")
    assert a.others() is None
    store.hold_reserves = None
    await a.view.heartbeat()
    assert a.view.shared
    await a.view.stop()


async def test_an_answer_later_than_the_requests_budget_keeps_the_view_shared() -> None:
    """A take slower than ``inflight_timeout_s`` that succeeds is a slow store, not a lost
    one: the request goes on at its budget, the answer lands, the view stays fleet-wide."""
    store = FakeInflightStore()
    a = await replica(store, slots=2, timeout_s=0.02)
    store.write_unannounced("ll-a", "other:1")  # another replica's lease, its message not here yet
    store.hold_answers = asyncio.Event()
    lease = a.take()
    assert await within(0.5, lease.confirm())  # went on at its budget with this replica's decision
    store.hold_answers.set()
    await until(lambda: a.others() == 1, 1.0, "the late answer applied to the view")
    assert a.view.shared and a.shared_changes == [True]
    lease.release()
    await until(lambda: list(store._live("ll-a")) == ["other:1"], 1.0, "released after its take")
    await a.view.stop()


async def test_a_release_during_a_renewal_is_not_written_back() -> None:
    store = FakeInflightStore()
    a = await replica(store)
    lease = a.take()
    await lease.confirm()
    real_renew = store.renew_and_read

    async def renew_then_released(held, workers, ttl_s):  # type: ignore[no-untyped-def]
        lease.release()  # ...its removal reaches the store before the renewal does
        await asyncio.sleep(0)
        return await real_renew(held, workers, ttl_s)

    store.renew_and_read = renew_then_released  # type: ignore[method-assign]
    await a.view.heartbeat()
    await until(lambda: not store._live("ll-a"), 1.0, "the renewed-back lease removed again")
    await a.view.stop()


async def test_the_releases_of_one_turn_go_out_in_one_round_trip() -> None:
    store = FakeInflightStore()
    a, b = await replica(store, slots=4), await replica(store, slots=4)
    taken = [a.take() for _ in range(3)]
    for lease in taken:
        assert await lease.confirm()
    assert b.others() == 3
    calls = store.release_calls
    for lease in taken:
        lease.release()
    await until(lambda: b.others() == 0, 1.0, "all three releases seen")
    assert store.release_calls == calls + 1
    await a.view.stop()
    await b.view.stop()


async def test_a_take_that_finds_leases_the_decision_did_not_count_is_decided_again() -> None:
    """Under its cap, but busier than the policy chose it for: the view was stale."""
    store = FakeInflightStore()
    a = await replica(store, slots=4)
    for i in range(2):  # another replica's leases, their messages not here yet
        store.write_unannounced("ll-a", f"other:{i}")
    stale = a.take()
    assert not await stale.confirm()  # decided again...
    assert a.others() == 2  # ...on the counts the answer brought
    stale.release()
    fresh = a.take()  # decided with both counted: it stands
    assert await fresh.confirm()
    await a.view.stop()


async def test_a_refused_take_is_never_counted_by_any_replica() -> None:
    """Written and then released, a refused take made every other replica route around
    the worker for the round trips between: now the store never writes it."""
    store = FakeInflightStore()
    a, b, c = await replica(store), await replica(store), await replica(store)
    seen_by_c: list[int | None] = []
    store._followers.append((lambda op, w, i: seen_by_c.append(c.others()), asyncio.Event()))
    store.hold_reserves = asyncio.Event()
    first, second = a.take(), b.take()  # both saw ll-a's one slot free
    answers = asyncio.gather(first.confirm(), second.confirm())
    await asyncio.sleep(0)
    store.hold_reserves.set()
    results = await answers
    loser = (first, second)[results.index(False)]
    assert list(store._live("ll-a")) == [(first, second)[results.index(True)].shared_id]
    releases = store.release_calls
    loser.release()
    await asyncio.sleep(0.05)
    assert store.release_calls == releases  # nothing written, nothing to remove
    assert c.others() == 1 and max(seen_by_c) <= 1  # c only ever counted the winner
    for r in (a, b, c):
        await r.view.stop()


async def test_a_take_refused_while_the_fleet_holds_the_cap_counts_this_replicas_own_leases() -> None:
    store = FakeInflightStore()
    a, b = await replica(store, slots=2), await replica(store, slots=2)
    held = b.take()
    assert await held.confirm()
    await until(lambda: a.others() == 1, 1.0, "b's lease seen by a")
    mine = a.take()
    assert await mine.confirm()  # 1 of b's + this one: the cap of 2
    over = a.take()  # a's view alone would allow it (one of its two slots is its own)
    assert not await over.confirm()  # b's and a's own: the worker is full
    assert len(store._live("ll-a")) == 2 and a.view.describe()["redecided"] == 1
    for lease in (over, mine, held):
        lease.release()
    await a.view.stop()
    await b.view.stop()


async def test_the_replicas_own_pending_release_holds_no_slot() -> None:
    store = FakeInflightStore()
    a = await replica(store, slots=1)
    first = a.take()
    assert await first.confirm()
    first.release()  # its removal reaches the store after the next take does
    second = a.take()
    assert await second.confirm()  # the one slot is free: not refused for our own released lease
    await until(lambda: list(store._live("ll-a")) == [second.shared_id], 1.0, "only the second held")
    await a.view.stop()


async def test_a_late_take_answer_does_not_bring_back_a_released_lease() -> None:
    store = FakeInflightStore()
    a, b = await replica(store, slots=4), await replica(store, slots=4)
    theirs = b.take()
    assert await theirs.confirm()
    assert a.others() == 1
    store.hold_answers = asyncio.Event()
    mine = a.take()
    await asyncio.sleep(0)  # the take ran in the store with b's lease still there...
    theirs.release()
    await until(lambda: a.others() == 0, 1.0, "b's release seen by a")
    store.hold_answers.set()  # ...and its answer arrives after the release
    assert await mine.confirm()
    assert a.others() == 0
    await a.view.stop()
    await b.view.stop()


async def test_a_lease_written_back_after_its_release_is_not_counted_or_freed_twice() -> None:
    store = FakeInflightStore()
    a, b = await replica(store, slots=4), await replica(store, slots=4)
    theirs = b.take()
    assert await theirs.confirm()
    lease_id = theirs.shared_id
    assert lease_id is not None
    theirs.release()
    await until(lambda: a.others() == 0, 1.0, "b's release seen by a")
    freed = len(a.freed)
    store.write_unannounced("ll-a", lease_id)  # b's renewal, on its way, wrote it back
    await a.view.heartbeat()
    assert a.others() == 0
    store._publish("-", "ll-a", lease_id)  # b removes it again: a second release of the same id
    assert a.others() == 0 and len(a.freed) == freed
    await a.view.stop()
    await b.view.stop()


async def test_the_view_counts_its_takes_their_peak_and_the_re_decisions() -> None:
    store = FakeInflightStore()
    a, b = await replica(store), await replica(store)
    store.hold_reserves = asyncio.Event()
    first, second = a.take(), b.take()  # both saw ll-a's one slot free
    answers = asyncio.gather(first.confirm(), second.confirm())
    await asyncio.sleep(0)
    store.hold_reserves.set()
    won = (await answers).index(True)
    winner, loser = (a, b) if won == 0 else (b, a)
    assert {k: winner.view.describe()[k] for k in ("reservations", "peak_fleet_leases", "redecided")} == {
        "reservations": 1,
        "peak_fleet_leases": {"ll-a": 1},
        "redecided": 0,
    }
    assert {k: loser.view.describe()[k] for k in ("reservations", "peak_fleet_leases", "redecided")} == {
        "reservations": 1,
        "peak_fleet_leases": {"ll-a": 1},  # the refused take was never held
        "redecided": 1,
    }
    await a.view.stop()
    await b.view.stop()


async def test_a_release_waited_for_is_known_to_the_other_replicas_when_the_wait_returns() -> None:
    store = FakeInflightStore()
    a, b = await replica(store, slots=4), await replica(store, slots=4)
    lease = a.take()
    assert await lease.confirm()
    assert b.others() == 1
    await lease.release_fleet_wide()
    assert b.others() == 0  # no await between: the release reached b before the wait returned
    await lease.release_fleet_wide()  # again: released already, returns at once
    await a.view.stop()
    await b.view.stop()


async def test_a_release_wait_is_bounded_by_the_requests_budget() -> None:
    store = FakeInflightStore()
    a = await replica(store, slots=4, timeout_s=0.05)
    lease = a.take()
    assert await lease.confirm()
    never = asyncio.Event()

    async def stuck_release(leases):  # type: ignore[no-untyped-def]
        await never.wait()

    store.release = stuck_release  # type: ignore[method-assign]
    await within(1.0, lease.release_fleet_wide())  # the store never answers; the wait ends
    await a.view.stop()


async def test_a_refused_take_a_heartbeat_wrote_back_is_removed_at_its_release() -> None:
    """The heartbeat renews every lease held here; one whose take was then refused was left
    in the store until its TTL, a slot every replica counted and nobody held."""
    store = FakeInflightStore()
    a, b = await replica(store), await replica(store)
    theirs = b.take()
    assert await theirs.confirm()
    store.write_unannounced("ll-a", "gone:1")  # a lease a's view has not counted yet
    store.hold_answers = asyncio.Event()
    mine = a.take()  # decided on a view without it: refused, its answer on its way
    await asyncio.sleep(0)
    await a.view.heartbeat()  # ...while a heartbeat writes every lease held here back
    assert mine.shared_id in store._live("ll-a")
    store.hold_answers.set()
    assert not await mine.confirm()
    mine.release()
    await until(lambda: mine.shared_id not in store._live("ll-a"), 1.0, "the written-back lease removed")
    theirs.release()
    await a.view.stop()
    await b.view.stop()
