"""Which workers exist, as their sources report them, and which ones operators drained.

Worker sources (static config, the supervisor, DNS or Kubernetes discovery) only report
what exists through the ``WorkerSink`` methods; this is their one implementation. The
operator drain (persisted by ``DrainStore``) is applied here too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from gateway.pools.events import FleetEvents
from gateway.pools.readiness import Readiness
from gateway.pools.specs import PoolSpec
from gateway.pools.worker import Worker
from gateway.types import PoolName, WorkerState
from gateway.types.labels import EjectionReason, RestartReason

log = logging.getLogger("higgs_gateway.fleet")


class Members:
    def __init__(
        self,
        specs: dict[PoolName, PoolSpec],
        readiness: Readiness,
        events: FleetEvents,
        clock: Callable[[], float],
        drained: Iterable[str] = (),
    ) -> None:
        self._specs = specs
        self._readiness = readiness
        self._events = events
        self._clock = clock
        self._workers: dict[str, Worker] = {}
        self._drained_ids: set[str] = set(drained)

    @property
    def workers(self) -> Iterable[Worker]:
        return self._workers.values()

    def get(self, worker_id: str) -> Worker | None:
        return self._workers.get(worker_id)

    def is_current(self, worker: Worker) -> bool:
        """Whether ``worker`` is still the one behind its id (not removed or replaced)."""
        return self._workers.get(worker.worker_id) is worker

    # ---- WorkerSink -----------------------------------------------------------------
    def add_worker(self, pool: PoolName, worker_id: str, url: str, managed: bool = False) -> None:
        existing = self._workers.get(worker_id)
        url = url.rstrip("/")
        if existing is not None and existing.url == url:
            return
        worker = Worker(
            worker_id=worker_id,
            pool=pool,
            url=url,
            slots=self._specs[pool].slots_per_worker,
            managed=managed,
            drained=worker_id in self._drained_ids,
            state_since=self._clock(),
            restarts=0 if existing is None else existing.restarts + 1,
        )
        if existing is not None:
            # Same id, new address (a pod rescheduled): in-flight requests keep their
            # lease on the old object and release it there; the new one starts clean
            # (voices replayed before it is routable) under the same id, so its metric
            # series and operator drain carry over.
            existing.set_state(WorkerState.STOPPED, self._clock(), "replaced")
            self._readiness.cancel(worker_id)
        self._workers[worker_id] = worker
        if existing is not None:
            self._events.restarted(worker, RestartReason.ADDRESS_CHANGED)
            self._events.capacity_changed()
        log.info("worker %s added to %s at %s", worker_id, pool.value, url, extra={"worker": worker_id, "pool": pool.value})

    def remove_worker(self, worker_id: str) -> None:
        worker = self._workers.pop(worker_id, None)
        if worker is None:
            return
        worker.set_state(WorkerState.STOPPED, self._clock(), "removed")
        self._readiness.cancel(worker_id)
        self._events.capacity_changed()

    def worker_restarting(self, worker_id: str) -> None:
        worker = self._workers.get(worker_id)
        if worker is None:
            return
        self._readiness.cancel(worker_id)
        was_ready = worker.state is WorkerState.READY
        if worker.process_restarting(self._clock()):
            if was_ready:
                self._events.ejected(worker, EjectionReason.PROCESS_EXIT)
            self._events.restarted(worker, RestartReason.PROCESS_EXIT)
            self._events.capacity_changed()

    def worker_failed(self, worker_id: str, reason: str) -> None:
        worker = self._workers.get(worker_id)
        if worker is None:
            return
        self._readiness.cancel(worker_id)
        if worker.fail(reason, self._clock()):
            self._events.capacity_changed()

    def set_retiring(self, worker_id: str, retiring: bool) -> Worker | None:
        """A worker about to leave its pool (a profile change) takes no new requests; its
        in-flight ones finish. Undone when the change is called off."""
        worker = self._workers.get(worker_id)
        if worker is None or worker.retiring == retiring:
            return worker
        worker.set_retiring(retiring)
        log.info("worker %s %s", worker_id, "retiring" if retiring else "no longer retiring", extra={"worker": worker_id})
        self._events.capacity_changed()
        return worker

    # ---- operator drain (persisted by DrainStore, applied here) -----------------------
    def set_drained(self, worker_id: str, drained: bool) -> Worker:
        worker = self._workers[worker_id]
        if drained:
            self._drained_ids.add(worker_id)
        else:
            self._drained_ids.discard(worker_id)
        worker.set_drained(drained)
        log.info("worker %s %s by operator", worker_id, "drained" if drained else "undrained", extra={"worker": worker_id})
        self._events.capacity_changed()
        return worker

    def apply_drained(self, drained_ids: Iterable[str]) -> None:
        """Follow the drained set another replica wrote (workers not known yet included)."""
        self._drained_ids = set(drained_ids)
        changed = False
        for worker in self._workers.values():
            drained = worker.worker_id in self._drained_ids
            if worker.drained != drained:
                worker.set_drained(drained)
                changed = True
        if changed:
            self._events.capacity_changed()
