"""Every replica's leases on every worker, shared through the state store in real time.

Each gateway replica knows its own leases exactly; without this it learns the others'
only from the workers' own reports, a second old, so under a burst every replica sends
its `latency` requests to the same free worker. Here every lease is also a member of its
worker's set in the store (``InflightStore``):

- take: one atomic script adds the lease only if the decision stands, and answers with
  the worker's other leases at that instant. It stands unless the worker holds other
  replicas' leases the decision did not count (the view was stale) or the fleet already
  holds every slot of the worker; admission awaits the answer (``confirm``) and, when it
  did not stand, lets the policy choose again, once, on the now exact view: a capped slot
  is not handed out twice. A refused take is never written, so no replica ever counts it
  (written and then released, it made every other replica route around the worker for
  the round trips between, and a burst's refusals fed each other). One round trip. A
  heartbeat renews every lease held here, a refused one whose request went on included;
  a refused lease it wrote back is removed at its release like any other.
- release: removed in the background, the releases of one event-loop turn in one round
  trip. A streamed response waits for its own (``published``, bounded) between the
  worker's last chunk and the response's end: a client that sends its next request the
  moment one ends, through another replica, would otherwise find the slot still counted
  there and be routed around a free worker.
- every take and release is published; every replica applies the others' at once, so
  each decision sees the whole fleet's in-flight work, milliseconds old.
- a heartbeat (every third of ``state.inflight_lease_ttl_s``) renews this replica's
  leases and re-reads every worker's: a replica that dies stops renewing, its leases
  expire after the TTL and are gone from every view by the next heartbeat. A replica
  that starts, or comes back, reads the fleet's leases first and writes its own again.

A request waits at most ``state.inflight_timeout_s`` for its take's answer; a later one
still lands in the view. The store failing, or silent for ``state.timeout_s``: this
replica routes on its own leases plus the workers' reports, as a single replica does, says
so (log once, ``higgs_gateway_fleet_view_shared``, ``/admin/pools``) and rejoins at the
next heartbeat that succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections import deque
from dataclasses import dataclass
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol

from gateway.pools.events import FleetEvents
from gateway.pools.lease import Lease
from gateway.pools.worker import Worker

log = logging.getLogger(__name__)
FIRST_BACKOFF_S = 0.1
# Other replicas' lease ids seen released, remembered so that a late answer (a take's or a
# heartbeat's read, run in the store before the release) cannot bring one back: far more
# than the releases any answer can be late by, a few hundred KiB at most.
REMEMBERED_RELEASES = 4096


@dataclass(frozen=True, slots=True)
class Take:
    """When a take stands, judged by the store on the worker's live leases at that instant:
    none of another replica (not starting ``own_prefix``) outside ``counted`` (what the
    decision saw), and, with ``cap`` > 0, fewer than ``cap`` with ``ours`` (this replica's
    other leases held there)."""

    own_prefix: str
    counted: frozenset[str]
    ours: int
    cap: int

    def stands(self, live: Iterable[str]) -> bool:
        others = [i for i in live if not i.startswith(self.own_prefix)]
        if any(i not in self.counted for i in others):
            return False
        return self.cap <= 0 or len(others) + self.ours < self.cap


class InflightStore(Protocol):
    """Where the leases live (``gateway.state.inflight_redis``; a fake in unit tests)."""

    async def reserve(self, worker_id: str, lease_id: str, ttl_s: float, take: Take) -> tuple[bool, list[str]]:
        """Add the lease unless ``take`` refuses the worker's live leases; returns whether it
        was added and those leases (every replica's, this one not among them)."""
        ...

    async def release(self, leases: Sequence[tuple[str, str]]) -> None:
        """Remove these (worker id, lease id) leases, in one round trip."""
        ...

    async def renew_and_read(
        self, held: Mapping[str, Sequence[str]], workers: Sequence[str], ttl_s: float
    ) -> dict[str, list[str]]:
        """(Re)write ``held`` (worker -> this replica's lease ids) for ``ttl_s`` more, drop the
        expired, and return every live lease of each of ``workers``."""
        ...

    async def follow(
        self, on_delta: Callable[[str, str, str], None], on_subscribed: Callable[[], Awaitable[None]]
    ) -> None:
        """Subscribe to takes/releases (``on_delta(op, worker_id, lease_id)``, op ``+``/``-``, once per lease),
        call ``on_subscribed``, and deliver until the connection is lost (then raise)."""
        ...

    async def close(self) -> None: ...


class Workers(Protocol):
    @property
    def workers(self) -> Iterable[Worker]: ...

    def get(self, worker_id: str) -> Worker | None: ...


class SharedInflight:
    """The fleet view of in-flight work: a ``pools.lease.SharedLeases`` over a store."""

    def __init__(
        self,
        store: InflightStore,
        members: Workers,
        events: FleetEvents,
        *,
        cap_of: Callable[[Worker], int],
        lease_ttl_s: float,
        timeout_s: float,
        heartbeat_timeout_s: float,
        on_shared: Callable[[bool], None] = lambda shared: None,
        max_backoff_s: float = 5.0,
    ) -> None:
        self._store = store
        self._members = members
        self._events = events
        self._cap_of = cap_of  # the slots a worker may carry at once (<= 0: uncapped)
        self._ttl_s = lease_ttl_s
        self._timeout_s = timeout_s
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._on_shared = on_shared
        self._max_backoff_s = max_backoff_s
        self.replica = uuid.uuid4().hex[:12]  # unique across replicas and restarts
        self._own_prefix = self.replica + ":"
        self._serial = itertools.count()
        self._held: dict[str, Lease] = {}  # lease id -> this replica's lease
        # Each lease's take, kept until the lease is released: its answer is read by ``confirm``
        # even when it came first, and the release waits for it.
        self._pending: dict[str, asyncio.Task[bool]] = {}
        # Leases a heartbeat wrote back before their take stood (its answer still on its way,
        # or a refusal): written after all, so their release must remove them.
        self._renewed_unsettled: set[str] = set()
        self._remote: dict[str, set[str]] = {}  # worker id -> other replicas' lease ids
        self._gone: set[str] = set()  # other replicas' lease ids seen released (bounded)
        self._gone_order: deque[str] = deque()
        self._reservations = 0  # takes the store answered
        self._redecided = 0  # takes whose answer sent the request back to the policy
        self._late = 0  # takes whose answer came after inflight_timeout_s: decided here alone
        self._peak: dict[str, int] = {}  # worker id -> most leases the fleet held there, per the takes
        self._subscribed = False
        self._joined = False  # subscribed during the follower's current attempt
        self._shared = False
        # Deltas that arrive while a heartbeat's read is on its way, applied over its answer.
        self._during_read: list[tuple[str, str, str]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # background writes, kept referenced
        self._releasing: list[tuple[str, str]] = []  # this turn's releases, sent together
        # Lease id -> done when its release reached the store (and so every follower).
        self._publishing: dict[str, asyncio.Future[None]] = {}
        self._loops: list[asyncio.Task[None]] = []

    # ---- what routing and operators see -----------------------------------------------
    @property
    def shared(self) -> bool:
        """True while every decision here counts every replica's leases."""
        return self._shared

    def describe(self) -> dict[str, object]:
        return {
            "shared": self._shared,
            "mode": "fleet" if self._shared else "this replica's leases plus the workers' reports",
            "replica": self.replica,
            "lease_ttl_s": self._ttl_s,
            "other_replicas_leases": sum(len(ids) for ids in self._remote.values()) if self._shared else None,
            "reservations": self._reservations,
            "peak_fleet_leases": dict(self._peak),
            "redecided": self._redecided,
            "late_answers": self._late,
        }

    # ---- SharedLeases -------------------------------------------------------------------
    def taken(self, lease: Lease) -> None:
        lease_id = f"{self.replica}:{next(self._serial)}"
        lease.shared_id = lease_id
        self._held[lease_id] = lease
        if self._shared:
            # What the decision counted here (taken in the same synchronous step): the others'
            # leases, and this replica's own still held (one whose release is on its way to
            # the store holds no slot).
            worker = lease.worker
            ours = sum(1 for i, held in self._held.items() if held.worker is worker and i != lease_id)
            take = Take(self._own_prefix, frozenset(self._remote.get(worker.worker_id, ())), ours, self._cap_of(worker))
            self._pending[lease_id] = asyncio.get_running_loop().create_task(self._reserve(lease, lease_id, take))

    async def confirm(self, lease: Lease) -> bool:
        """False: decide again (each False is one re-decision; admission asks again about the next)."""
        task = self._pending.get(lease.shared_id or "")
        if task is None:
            return True  # not shared when taken: this replica's view decides
        if not task.done():
            # ``wait`` never cancels the take: a request cancelled here, or one that stops
            # waiting, leaves the write its release follows running.
            await asyncio.wait((task,), timeout=self._timeout_s)
        if not task.done() or task.cancelled():
            self._late += 1
            # Late, not lost: the request goes on with this replica's decision; the answer
            # still lands in the view when it comes (``_reserve``).
            return True
        stands = task.result()
        if not stands:
            self._redecided += 1
        return stands

    def released(self, lease: Lease) -> None:
        lease_id = lease.shared_id
        if lease_id is None:
            return
        self._held.pop(lease_id, None)
        if self._shared:
            self._publishing[lease_id] = asyncio.get_running_loop().create_future()
        worker_id = lease.worker.worker_id
        task = self._pending.pop(lease_id, None)
        renewed = lease_id in self._renewed_unsettled
        self._renewed_unsettled.discard(lease_id)
        if task is not None and not task.done():
            # Removed only after it was added, never before (which would leave it behind).
            task.add_done_callback(lambda done: self._release_taken(done, worker_id, lease_id, renewed))
        elif task is not None:
            self._release_taken(task, worker_id, lease_id, renewed)
        else:
            self._send_release(worker_id, lease_id)

    def _release_taken(self, take: asyncio.Task[bool], worker_id: str, lease_id: str, renewed: bool) -> None:
        if not renewed and not self._stood(take):
            self._told(lease_id)  # refused: never written, nothing to remove
            return
        self._send_release(worker_id, lease_id)

    @staticmethod
    def _stood(take: asyncio.Task[bool] | None) -> bool:
        """True unless the take is still on its way or was refused."""
        if take is None:
            return True
        return take.done() and (take.cancelled() or take.exception() is not None or take.result())

    async def published(self, lease: Lease) -> None:
        done = self._publishing.get(lease.shared_id or "")
        if done is None:
            return  # not shared, or told already
        # ``wait`` never cancels the write: a request that stops waiting leaves it running.
        await asyncio.wait((done,), timeout=self._timeout_s)

    # ---- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loops = [
            loop.create_task(self._follow_forever(), name="inflight-follower"),
            loop.create_task(self._heartbeat_forever(), name="inflight-heartbeat"),
        ]

    async def stop(self) -> None:
        loops, self._loops = self._loops, []
        for task in loops:
            task.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Our leases are over as the gateway stops: give them back rather than let them expire.
        if self._shared:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self._heartbeat_timeout_s):
                    await self._store.release([(lease.worker.worker_id, i) for i, lease in self._held.items()])
        self._shared = False  # nothing more is written from here
        for task in [*self._tasks, *self._pending.values()]:
            task.cancel()
        await self._store.close()

    # ---- writes -------------------------------------------------------------------------
    async def _reserve(self, lease: Lease, lease_id: str, take: Take) -> bool:
        """Whether the decision stands (then the lease is written): not when it missed other
        replicas' leases here, nor when the fleet held every slot."""
        worker = lease.worker
        try:
            # Bounded by the store's own timeout, not the request's: an answer later than the
            # request waits for (``confirm``) is a slow store, not a lost one, and turning this
            # replica to reports only for it made its routing worse than one late take.
            async with asyncio.timeout(self._heartbeat_timeout_s):
                stands, before = await self._store.reserve(worker.worker_id, lease_id, self._ttl_s, take)
        except Exception as exc:  # failing or silent: never the request's problem
            self._lost(f"reserving a slot: {exc!r}")
            return True
        self._reservations += 1
        # Released already (its release overtook this answer): not brought back into the view.
        others = {i for i in before if not i.startswith(self._own_prefix) and i not in self._gone}
        remote = self._remote.setdefault(worker.worker_id, set())
        if not others <= remote:
            remote |= others
            self._count(worker.worker_id)
        ours = sum(1 for i in before if i.startswith(self._own_prefix) and i in self._held)
        fleet = len(others) + ours + (1 if stands else 0)  # this one included while it is held
        if fleet > self._peak.get(worker.worker_id, 0):
            self._peak[worker.worker_id] = fleet
        return stands

    def _send_release(self, worker_id: str, lease_id: str) -> None:
        if not self._shared:
            self._told(lease_id)
            return  # not renewed any more: it expires on its own within the TTL
        if not self._releasing:
            asyncio.get_running_loop().call_soon(self._flush_releases)
        self._releasing.append((worker_id, lease_id))

    def _flush_releases(self) -> None:
        leases, self._releasing = self._releasing, []
        task = asyncio.get_running_loop().create_task(self._release(leases))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release(self, leases: list[tuple[str, str]]) -> None:
        try:
            async with asyncio.timeout(self._heartbeat_timeout_s):
                await self._store.release(leases)
        except Exception as exc:
            self._lost(f"releasing slots: {exc!r}")
        finally:
            for _, lease_id in leases:
                self._told(lease_id)

    def _told(self, lease_id: str) -> None:
        done = self._publishing.pop(lease_id, None)
        if done is not None and not done.done():
            done.set_result(None)

    # ---- following the others ---------------------------------------------------------------
    def _on_delta(self, op: str, worker_id: str, lease_id: str) -> None:
        if lease_id.startswith(self._own_prefix):
            return
        if op == "+" and lease_id in self._gone:
            return  # its release came first: never counted again
        if op != "+":
            self._remember_released(lease_id)
        if self._during_read is not None:
            self._during_read.append((op, worker_id, lease_id))
        remote = self._remote.setdefault(worker_id, set())
        if op == "+":
            remote.add(lease_id)
            self._count(worker_id)
        elif lease_id in remote:
            remote.discard(lease_id)
            self._count(worker_id)
            if self._shared:
                self._events.slot_freed()  # another replica's slot came free: waiters may take it

    async def _on_subscribed(self) -> None:
        self._subscribed = self._joined = True
        await self.heartbeat()

    async def _follow_forever(self) -> None:
        backoff = FIRST_BACKOFF_S
        while True:
            self._joined = False
            try:
                await self._store.follow(self._on_delta, self._on_subscribed)
                why = "the subscription ended"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                why = repr(exc)
            self._subscribed = False
            self._lost(f"following other replicas: {why}")
            if self._joined:
                backoff = FIRST_BACKOFF_S
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff_s)

    async def _heartbeat_forever(self) -> None:
        while True:
            await asyncio.sleep(self._ttl_s / 3)
            if self._subscribed:
                await self.heartbeat()

    async def heartbeat(self) -> None:
        held: dict[str, list[str]] = {}
        for lease_id, lease in self._held.items():
            held.setdefault(lease.worker.worker_id, []).append(lease_id)
        workers = [w.worker_id for w in self._members.workers]
        self._during_read = during = []
        try:
            async with asyncio.timeout(self._heartbeat_timeout_s):
                leases = await self._store.renew_and_read(held, workers, self._ttl_s)
        except Exception as exc:
            self._lost(f"heartbeat: {exc!r}")
            return
        finally:
            self._during_read = None
        # A refused take the renewal wrote back (one whose request went on, its answer late,
        # or one about to be decided again) would otherwise stay in the store until its TTL:
        # every replica would count a slot nobody holds.
        self._renewed_unsettled.update(
            i for ids in held.values() for i in ids if i in self._held and not self._stood(self._pending.get(i))
        )
        # A lease released while the renewal was on its way may have been written back:
        # remove it again (its release may have reached the store first).
        for worker_id, ids in held.items():
            for lease_id in ids:
                if lease_id not in self._held:
                    self._send_release(worker_id, lease_id)
        # A lease written back by its replica's renewal after its release was seen here is
        # gone all the same (that replica removes it again): not counted, not freed twice.
        gone, own = self._gone, self._own_prefix
        remote = {w: {i for i in ids if not i.startswith(own) and i not in gone} for w, ids in leases.items()}
        for op, worker_id, lease_id in during:
            ids = remote.setdefault(worker_id, set())
            if op == "+":
                ids.add(lease_id)
            else:
                ids.discard(lease_id)
        self._remote = remote
        if self._subscribed:
            self._set_shared(True)
            self._count_all()

    def _remember_released(self, lease_id: str) -> None:
        if lease_id in self._gone:
            return
        self._gone.add(lease_id)
        self._gone_order.append(lease_id)
        if len(self._gone_order) > REMEMBERED_RELEASES:
            self._gone.discard(self._gone_order.popleft())

    # ---- the workers' counts ------------------------------------------------------------------
    def _count(self, worker_id: str) -> None:
        if not self._shared:
            return
        worker = self._members.get(worker_id)
        if worker is not None:
            worker.apply_fleet_leases(len(self._remote.get(worker_id, ())))

    def _count_all(self) -> None:
        for worker in self._members.workers:
            worker.apply_fleet_leases(len(self._remote.get(worker.worker_id, ())) if self._shared else None)

    def _lost(self, why: str) -> None:
        if self._shared:
            log.warning(
                "fleet view of in-flight work lost (%s); routing on this replica's leases and the workers' reports",
                why,
            )
        else:
            log.debug("fleet view still unavailable: %s", why)
        self._set_shared(False)

    def _set_shared(self, shared: bool) -> None:
        if shared == self._shared:
            return
        self._shared = shared
        if shared:
            log.info("fleet view of in-flight work shared with the other replicas")
        self._count_all()
        self._on_shared(shared)
        # Loads just changed source (exact fleet count vs reports): waiters may fit now.
        self._events.slot_freed()
