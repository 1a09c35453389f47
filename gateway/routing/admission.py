"""Admission: bounded per-class queues in front of the policy, and the only place that waits.

``admit`` asks the policy at once; a ROUTE comes straight back (no queue, no task). A WAIT
queues the request until ``capacity_changed`` (or the waiter's own timer: queue budget
spent, promotion, deadline) finds it a slot. Waiters are served latency, then balanced
(with promoted throughput, by arrival), then throughput; within the same class and wait
stage, strictly first come first served. How long a class may queue before its rule
changes (`latency` may spill, `throughput` is promoted) is declared by the class
(``routing.classes``); admission only keeps the clock.

``admit`` returns a ``Reservation``: the slot is taken (``reserve``, the fleet's lease) in
the same step the policy chooses it, before the answer leaves admission, whether on the
fast path or when a waiter is served. Nothing can take that slot in between, and the
view every later decision sees already counts it. The caller owns the reservation from
there and releases it once (the relay's open stream does).

Admission reports nothing on the side: the reservation carries the decision and how long
the request waited, a refusal (``AdmissionRejected``) its reason and wait, and the caller
hands both to the recorder once, when the request ends.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Awaitable, Callable, Set
from dataclasses import dataclass, replace
from typing import Generic

from gateway.config import AdmissionConfig, RoutingThresholds
from gateway.errors import GatewayError
from gateway.routing.classes.registry import CLASSES
from gateway.routing.policy import RoutingPolicy
from gateway.routing.reserve import LatencyDemand
from gateway.types import DROPPED_REASON_HEADER, SlaClass, reasons
from gateway.types.decision import Action, Decision
from gateway.types.reservation import Reservation, SlotT
from gateway.types.view import LoadView, RequestInfo

Clock = Callable[[], float]

# Decisions a request may have refused by the fleet (each one round trip to the shared
# store) before the next one stands without asking.
MAX_REDECISIONS = 8

# Service order: a lower index is served first.
PRIORITY = (SlaClass.LATENCY, SlaClass.BALANCED, SlaClass.THROUGHPUT)


class AdmissionRejected(GatewayError):
    """The request will not be routed: 429 (queue full) or 503, with ``Retry-After``.

    ``waited_s``: how long it queued before being turned away (None: refused on arrival)."""

    def __init__(
        self, reason: str, status: int, retry_after_s: int, message: str, sla_class: SlaClass, waited_s: float | None = None
    ) -> None:
        super().__init__(
            status,
            message,
            code=reason,
            headers={"Retry-After": str(retry_after_s), DROPPED_REASON_HEADER: reason},
        )
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.sla_class = sla_class
        self.waited_s = waited_s


@dataclass(frozen=True, slots=True)
class _Arrival:
    seq: int  # arrival order across all classes
    at: float  # when admission was first asked


@dataclass(eq=False, slots=True)
class _Waiter(Generic[SlotT]):
    request: RequestInfo
    seq: int  # arrival order across all classes
    enqueued_at: float
    deadline: float
    spill_at: float | None  # latency: when its queue budget is spent
    promote_at: float | None  # throughput: when it starts being served like balanced
    promoted_to: SlaClass | None
    future: asyncio.Future[Reservation[SlotT]]

    def promoted(self, now: float) -> bool:
        return self.promote_at is not None and now >= self.promote_at

    def as_routed(self, now: float) -> RequestInfo:
        """The request as the policy should see it at ``now``."""
        request = self.request
        if self.promoted_to is not None and self.promoted(now):
            request = replace(request, sla_class=self.promoted_to)
        if self.spill_at is not None and now >= self.spill_at and not request.waited_out:
            request = replace(request, waited_out=True)
        return _spent(request, now - self.enqueued_at)

    def next_event(self, now: float) -> float:
        upcoming = [t for t in (self.spill_at, self.promote_at) if t is not None and t > now]
        return min([*upcoming, self.deadline])


class Admission(Generic[SlotT]):
    def __init__(
        self,
        config: AdmissionConfig,
        policy: RoutingPolicy,
        thresholds: Callable[[], RoutingThresholds],
        snapshot: Callable[[], LoadView],
        reserve: Callable[[str], SlotT],
        any_routable: Callable[[], bool],
        clock: Clock = time.monotonic,
        demand: LatencyDemand | None = None,
        confirm: Callable[[SlotT], Awaitable[bool]] | None = None,
    ) -> None:
        self._config = config
        # With replicas sharing a fleet view: is the held slot ours fleet-wide? (None: one
        # replica, the slot held here is the whole truth, and admission never awaits it.)
        self._confirm = confirm
        # Every request that reaches admission, counted for the fleet planner (a tally:
        # two integer additions, no clock, no lock); ``count_arrivals`` sets it.
        self._on_arrival: Callable[[RequestInfo], None] | None = None
        # Told of every `latency` arrival: the latency reserve is sized from them (off this path).
        self._demand = demand
        self._policy = policy
        self._thresholds = thresholds
        self._snapshot = snapshot
        self._reserve = reserve  # takes a slot on a worker now (the fleet's lease)
        self._any_routable = any_routable  # the precheck's question, without building a view
        self._clock = clock
        self._queues: dict[SlaClass, dict[int, _Waiter[SlotT]]] = {sla: {} for sla in PRIORITY}
        self._queued = 0
        self._next_seq = 0
        self._closed = False

    # --- public -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the gateway started shutting down: every request is refused."""
        return self._closed

    def count_arrivals(self, on_arrival: Callable[[RequestInfo], None]) -> None:
        """Tell ``on_arrival`` of every request admission is asked to place (the fleet
        planner's tally), before the policy answers."""
        self._on_arrival = on_arrival

    def set_policy(self, policy: RoutingPolicy) -> None:
        """Swap the policy at run time (the admin API changed ``routing.policy``); a new
        policy starts with fresh memory of its own."""
        self._policy = policy
        self.capacity_changed()

    async def admit(self, request: RequestInfo) -> Reservation[SlotT]:
        """A held slot with the decision behind it, or raises ``AdmissionRejected``."""
        sla = request.sla_class
        if self._closed:
            raise self._rejected(sla, reasons.SHUTTING_DOWN)
        if self._on_arrival is not None:
            self._on_arrival(request)
        if sla is SlaClass.LATENCY and self._demand is not None:
            self._demand.on_arrival(self._clock(), request.input_chars)
        # Its place in line, kept however often it is decided: a request the fleet sends back
        # is not a new arrival.
        arrival = _Arrival(self._next_seq, self._clock())
        self._next_seq += 1
        reservation = await self._admit_here(request, arrival)
        if self._confirm is None:
            return reservation
        return await self._confirmed(request, arrival, reservation)

    async def _confirmed(
        self, request: RequestInfo, arrival: _Arrival, reservation: Reservation[SlotT]
    ) -> Reservation[SlotT]:
        """The reservation once the fleet agrees with its decision; else decided again.

        A decision may have been made on a stale view: another replica's leases on that
        worker (the last slot of a capped one, or enough to change the policy's choice) had
        not reached this replica yet. The take's answer holds them, and the view counts them
        by now, so the next decision sees the worker as it is (and waits, or goes
        elsewhere). That decision is asked about too: in a burst split over replicas, the
        others' takes keep landing while this one is decided again, and a second decision
        that went ahead unasked put a capped low-latency worker 7 to 10 requests over its
        ``max_num_seqs`` at the start of a c64 burst on three replicas. Those waited seconds
        inside the worker, and, refused, they were in no replica's view. After
        ``MAX_REDECISIONS`` the last decision stands as it is: a policy that picks the same
        worker again whatever the view says (the baselines) keeps it.

        If it waits again, it waits in the place it arrived in, its budgets counted from its
        arrival: at the back, a waiter that lost a freed slot to another replica's take
        would lose its turn to every later arrival too, each time."""
        assert self._confirm is not None
        for _ in range(MAX_REDECISIONS):
            try:
                if await self._confirm(reservation.slot):
                    return reservation
            except BaseException:
                reservation.release()  # cancelled while asking: the caller never owned it
                raise
            reservation.release()
            reservation = await self._admit_here(request, arrival)
        return reservation

    async def _admit_here(self, request: RequestInfo, arrival: _Arrival) -> Reservation[SlotT]:
        """A slot held in this replica: at once, or after waiting in the queue."""
        sla = request.sla_class
        if self._closed:
            raise self._rejected(sla, reasons.SHUTTING_DOWN)
        now = self._clock()
        thresholds = self._thresholds()
        spill_at = None
        budget = CLASSES[sla].spill_after_s(request, thresholds)
        if budget is not None:
            spill_at = arrival.at + budget
            if spill_at <= now:
                request = replace(request, waited_out=True)

        if self._queued == 0:
            # Fast path: nobody to overtake, so ask the policy directly.
            decision = self._policy.decide(_spent(request, now - arrival.at), self._snapshot(), thresholds)
            if decision.action == Action.ROUTE:
                return self._held(decision, 0.0)
            if decision.action == Action.REJECT:
                raise self._rejected(sla, decision.reason)

        queue = self._queues[sla]
        if len(queue) >= self._config.queue_limit(sla):
            raise self._rejected(sla, reasons.QUEUE_FULL)
        waiter = self._enqueue(request, arrival, spill_at)
        if self._queued > 1:
            # Others were queued: the newcomer takes its turn in a full service pass.
            self._serve()
        return await self._wait(waiter)

    def retry(self, request: RequestInfo, tried: Set[str]) -> Reservation[SlotT] | None:
        """Another worker for an admitted request whose worker failed before the first byte,
        or None when the policy finds none with room now (a retry never queues: it was
        admitted before the waiters). The policy decides it like any request of its class,
        the tried workers excluded, with the same caps, ceilings and latency reserve; it
        already waited, so a `latency` retry may spill. Slots handed to waiters are held,
        so a retry never gets one."""
        if self._closed:
            return None
        retry = replace(request, waited_out=True, tried=frozenset(tried))
        decision = self._policy.decide(retry, self._snapshot(), self._thresholds())
        if decision.action is not Action.ROUTE:
            return None
        return self._held(replace(decision, reason=reasons.RETRY_OTHER_WORKER), 0.0)

    def precheck(self, sla: SlaClass) -> None:
        """Cheap checks made before the request body is read, so a flood is turned away
        without parsing it: the class queue is full (429) or no worker is routable (503)."""
        if self._closed:
            raise self._rejected(sla, reasons.SHUTTING_DOWN)
        if len(self._queues[sla]) >= self._config.queue_limit(sla):
            raise self._rejected(sla, reasons.QUEUE_FULL)
        if not self._any_routable():
            raise self._rejected(sla, reasons.NO_WORKERS)

    def capacity_changed(self) -> None:
        """A lease ended or a worker's state/report changed: serve waiters in priority order.

        Cheap and synchronous; safe to call often (returns at once when nobody waits).
        """
        self._serve()

    def queue_depths(self) -> dict[SlaClass, int]:
        return {sla: len(queue) for sla, queue in self._queues.items()}

    def close(self) -> None:
        """Shutdown: every waiter (and every later ``admit``) is rejected with 503 shutting_down."""
        self._closed = True
        now = self._clock()
        for waiter in self._all_waiters():
            self._reject_waiter(waiter, reasons.SHUTTING_DOWN, now)

    # --- queueing ---------------------------------------------------------------------

    def _enqueue(self, request: RequestInfo, arrival: _Arrival, spill_at: float | None) -> _Waiter[SlotT]:
        sla = request.sla_class
        deadline = arrival.at + self._config.max_wait(sla)
        promoted_to = CLASSES[sla].promoted_to
        promote_at = arrival.at + self._config.promote_after_s if promoted_to is not None else None
        waiter: _Waiter[SlotT] = _Waiter(
            request=request,
            seq=arrival.seq,
            enqueued_at=arrival.at,
            deadline=deadline,
            # Past the deadline there is no point spilling: the last chance is at the deadline.
            spill_at=None if spill_at is None else min(spill_at, deadline),
            promote_at=promote_at,
            promoted_to=promoted_to,
            future=asyncio.get_running_loop().create_future(),
        )
        queue = self._queues[sla]
        # In arrival order (a queue is served, and expires, in its dict's order): one sent
        # back by the fleet goes ahead of the later arrivals.
        later = [queue.pop(seq) for seq in [seq for seq in queue if seq > waiter.seq]]
        queue[waiter.seq] = waiter
        for other in later:
            queue[other.seq] = other
        self._queued += 1
        return waiter

    def _dequeue(self, waiter: _Waiter[SlotT]) -> None:
        sla = waiter.request.sla_class
        del self._queues[sla][waiter.seq]
        self._queued -= 1

    async def _wait(self, waiter: _Waiter[SlotT]) -> Reservation[SlotT]:
        future = waiter.future
        # When the queue was last served for this waiter: events after it are still due.
        # Event loops may fire a timer slightly before the clock reaches its target; an
        # event is only dropped once a serve pass has seen the clock past it, otherwise a
        # latency request would miss its spill time and sit until its deadline.
        served_at = waiter.enqueued_at
        try:
            while not future.done():
                # Wake for the waiter's own next event even if capacity never changes.
                now = self._clock()
                await asyncio.wait((future,), timeout=max(waiter.next_event(served_at) - now, 0.0))
                if not future.done():
                    served_at = self._clock()
                    self._serve()
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise
        return future.result()  # raises AdmissionRejected; from here the caller owns the slot

    def _abandon(self, waiter: _Waiter[SlotT]) -> None:
        """The client went away while queued: leave no trace, give back a slot held for it."""
        future = waiter.future
        if not future.done():
            self._dequeue(waiter)
            future.cancel()
        elif not future.cancelled() and future.exception() is None:
            future.result().release()  # nobody else owns it: the caller never got it
            self._serve()

    # --- serving ----------------------------------------------------------------------

    def _serve(self) -> None:
        if self._queued == 0:
            return
        now = self._clock()
        thresholds = self._thresholds()
        view = self._snapshot()
        # A waiter never overtakes an earlier one the policy saw the same way in this pass.
        blocked: set[tuple[SlaClass, bool]] = set()
        exhausted = _nothing_free(view)
        for waiter in [] if exhausted else self._service_order(now):
            request = waiter.as_routed(now)
            key = (request.sla_class, request.waited_out)
            if key in blocked:
                continue
            decision = self._policy.decide(request, view, thresholds)
            if decision.action == Action.ROUTE:
                worker_id = self._hand_out(waiter, decision, now)
                # The slot is held; count it in this pass's view without a new snapshot.
                view = view.with_leases({worker_id: 1})
                if _nothing_free(view):
                    break
            elif decision.action == Action.REJECT:
                self._reject_waiter(waiter, decision.reason, now)
            else:
                blocked.add(key)
        self._expire(now)

    def _service_order(self, now: float) -> list[_Waiter[SlotT]]:
        throughput = list(self._queues[SlaClass.THROUGHPUT].values())
        promoted = [w for w in throughput if w.promoted(now)]
        not_promoted = [w for w in throughput if not w.promoted(now)]
        balanced = heapq.merge(self._queues[SlaClass.BALANCED].values(), promoted, key=lambda w: w.seq)
        return [*self._queues[SlaClass.LATENCY].values(), *balanced, *not_promoted]

    def _expire(self, now: float) -> None:
        for queue in self._queues.values():
            # Deadlines grow in arrival order within a class (fixed max wait), so stop early.
            expired = []
            for waiter in queue.values():
                if now < waiter.deadline:
                    break
                expired.append(waiter)
            for waiter in expired:
                self._reject_waiter(waiter, reasons.WAIT_TIMEOUT, now)

    def _held(self, decision: Decision, waited_s: float) -> Reservation[SlotT]:
        """The slot ``decision`` chose, taken now: the only way a decision leaves admission."""
        assert decision.worker_id is not None
        return Reservation(decision, self._reserve(decision.worker_id), waited_s)

    def _hand_out(self, waiter: _Waiter[SlotT], decision: Decision, now: float) -> str:
        self._dequeue(waiter)
        reservation = self._held(decision, now - waiter.enqueued_at)
        waiter.future.set_result(reservation)
        return reservation.worker_id

    def _reject_waiter(self, waiter: _Waiter[SlotT], reason: str, now: float) -> None:
        self._dequeue(waiter)
        waiter.future.set_exception(self._rejected(waiter.request.sla_class, reason, now - waiter.enqueued_at))

    def _all_waiters(self) -> list[_Waiter[SlotT]]:
        return [w for queue in self._queues.values() for w in queue.values()]

    def _rejected(self, sla: SlaClass, reason: str, waited_s: float | None = None) -> AdmissionRejected:
        status = 429 if reason == reasons.QUEUE_FULL else 503
        message = _MESSAGES.get(reason, "This {sla} request cannot be routed right now ({reason}).")
        return AdmissionRejected(
            reason, status, self._config.retry_after_s, message.format(sla=sla, reason=reason), sla, waited_s
        )


def _spent(request: RequestInfo, elapsed_s: float) -> RequestInfo:
    """A deadline is counted from the request's arrival: time spent since is taken from it."""
    if request.deadline_s is None or elapsed_s <= 0:
        return request
    return replace(request, deadline_s=request.deadline_s - elapsed_s)


def _nothing_free(view: LoadView) -> bool:
    """True when routable workers exist but none has a slot: no waiter can be routed now.

    (With no routable worker at all, the policy still has to answer, to reject.)
    """
    routable = [w for w in view.workers if w.routable]
    return bool(routable) and all(w.free == 0 for w in routable)


_MESSAGES = {
    reasons.QUEUE_FULL: "Too many {sla} requests are waiting for a worker; retry later.",
    reasons.WAIT_TIMEOUT: "No worker became free in time for this {sla} request; retry later.",
    reasons.NO_WORKERS: "No speech worker is available right now; retry later.",
    reasons.SHUTTING_DOWN: "The gateway is shutting down; retry on another replica.",
}
