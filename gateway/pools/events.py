"""What the fleet's parts announce: capacity may have changed, a worker was ejected, a
worker restarted. Listeners are registered once, at wiring time in ``app.create_app``."""

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
        self._capacity: list[Callable[[], None]] = []
        self._ejection: list[EjectionListener] = []
        self._restart: list[RestartListener] = []

    def on_capacity_change(self, listener: Callable[[], None]) -> None:
        """Called whenever routable capacity may have changed (admission wakes waiters)."""
        self._capacity.append(listener)

    def on_ejection(self, listener: EjectionListener) -> None:
        self._ejection.append(listener)

    def on_worker_restarted(self, listener: RestartListener) -> None:
        """Called once per restart noticed, whatever the source: a supervised process that
        exited, a new start time or lost voices behind the same address, or a worker id
        that reappeared at another address (a rescheduled pod)."""
        self._restart.append(listener)

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
