"""What the fleet's parts announce: a slot was freed, capacity may have changed, a worker
was ejected, a worker restarted. Listeners are registered once, at wiring time in
``app.create_app``."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.pools.worker import Worker
from gateway.types.labels import EjectionReason, RestartReason

log = logging.getLogger("higgs_gateway.fleet")

# (worker, why): the worker behind this id is a new process; what was learned about the
# old one (load reports, performance estimates) no longer holds.
RestartListener = Callable[[Worker, RestartReason], None]
EjectionListener = Callable[[Worker, EjectionReason], None]


class FleetEvents:
    def __init__(self) -> None:
        self._slot_freed: list[Callable[[], None]] = []
        self._capacity: list[Callable[[], None]] = []
        self._ejection: list[EjectionListener] = []
        self._restart: list[RestartListener] = []

    def on_slot_freed(self, listener: Callable[[], None]) -> None:
        """Called when a lease ends: one more free slot, on a worker whose state did not
        change (so only waiters care: admission serves its queue). Kept apart from
        ``on_capacity_change`` because it fires once per request."""
        self._slot_freed.append(listener)

    def on_capacity_change(self, listener: Callable[[], None]) -> None:
        """Called whenever routable capacity may have changed: a worker's state, drain or
        membership (admission wakes waiters, pool availability recounts)."""
        self._capacity.append(listener)

    def on_ejection(self, listener: EjectionListener) -> None:
        self._ejection.append(listener)

    def on_worker_restarted(self, listener: RestartListener) -> None:
        """Called once per restart noticed, whatever the source: a supervised process that
        exited, a new start time or lost voices behind the same address, or a worker id
        that reappeared at another address (a rescheduled pod)."""
        self._restart.append(listener)

    def slot_freed(self) -> None:
        for listener in self._slot_freed:
            listener()

    def capacity_changed(self) -> None:
        for listener in self._capacity:
            listener()

    def ejected(self, worker: Worker, reason: EjectionReason) -> None:
        for listener in self._ejection:
            listener(worker, reason)

    def restarted(self, worker: Worker, why: RestartReason) -> None:
        log.warning(
            "worker %s restarted (%s): treated as new until its voices are replayed",
            worker.worker_id, why, extra={"worker": worker.worker_id, "pool": worker.pool.value},
        )  # fmt: skip
        for listener in self._restart:
            try:
                listener(worker, why)
            except Exception:  # a subscriber's bug must not leave the worker half-reset
                log.exception("restart listener failed for %s", worker.worker_id)
