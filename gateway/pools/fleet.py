"""Every worker of both pools, and the one owner of their state transitions.

Worker sources (static config, the supervisor, DNS or Kubernetes discovery) only report
what exists through the ``WorkerSink`` methods; the health checker and the relay report
what they saw. The fleet turns all of that into states, and wakes admission whenever
capacity may have changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from gateway.config import GatewayConfig
from gateway.deploy_profile import load_deploy_profile
from gateway.pools.lease import Lease
from gateway.pools.worker import Worker
from gateway.routing.model import LoadView
from gateway.routing.capacity import default_slots
from gateway.types import PoolName, WorkerState
from gateway.upstream.errors import UpstreamErrorKind

log = logging.getLogger("higgs_gateway.fleet")

# Before a worker becomes routable: voices replayed, warm-up done. Raises to stay unready.
PrepareHook = Callable[[Worker], Awaitable[None]]
# (worker, why): the worker behind this id is a new process; what was learned about the
# old one (load reports, performance estimates) no longer holds.
RestartListener = Callable[[Worker, str], None]


@dataclass(frozen=True)
class PoolSpec:
    name: PoolName
    profile_path: str
    max_num_seqs: int
    slots_per_worker: int
    max_model_len: int | None = None  # Stage 0's: the longest generation a worker can run


def pool_specs(config: GatewayConfig) -> dict[PoolName, PoolSpec]:
    specs: dict[PoolName, PoolSpec] = {}
    for name, pool in config.pools.items():
        profile = load_deploy_profile(pool.profile, (pool.launch.stage_overrides if pool.launch else None))
        max_num_seqs = profile.talker.max_num_seqs
        specs[name] = PoolSpec(
            name=name,
            profile_path=profile.source,
            max_num_seqs=max_num_seqs,
            slots_per_worker=default_slots(name, pool.slots_per_worker, max_num_seqs),
            max_model_len=profile.talker.max_model_len,
        )
    return specs


class Fleet:
    def __init__(
        self,
        config: GatewayConfig,
        specs: dict[PoolName, PoolSpec],
        clock: Callable[[], float] = time.monotonic,
        drained: Iterable[str] = (),
    ) -> None:
        self._config = config
        self.specs = specs
        self._clock = clock
        self._workers: dict[str, Worker] = {}
        self._capacity_listeners: list[Callable[[], None]] = []
        self._prepare: PrepareHook | None = None
        self._preparing: dict[str, asyncio.Task[None]] = {}
        self._drained_ids: set[str] = set(drained)
        self._ejection_listeners: list[Callable[[Worker, str], None]] = []
        self._restart_listeners: list[RestartListener] = []

    # ---- wiring -------------------------------------------------------------------
    def on_capacity_change(self, listener: Callable[[], None]) -> None:
        self._capacity_listeners.append(listener)

    def on_ejection(self, listener: Callable[[Worker, str], None]) -> None:
        self._ejection_listeners.append(listener)

    def on_worker_restarted(self, listener: RestartListener) -> None:
        """Called once per restart noticed, whatever the source: a supervised process that
        exited, a new start time or lost voices behind the same address, or a worker id
        that reappeared at another address (a rescheduled pod)."""
        self._restart_listeners.append(listener)

    def set_prepare_hook(self, hook: PrepareHook) -> None:
        self._prepare = hook

    def _capacity_changed(self) -> None:
        for listener in self._capacity_listeners:
            listener()

    # ---- views --------------------------------------------------------------------
    @property
    def workers(self) -> Iterable[Worker]:
        return self._workers.values()

    def get(self, worker_id: str) -> Worker | None:
        return self._workers.get(worker_id)

    def snapshot(self) -> LoadView:
        now = self._clock()
        stale = self._config.load_reports.stale_after_s
        return LoadView(tuple(w.load_view(now, stale) for w in self._workers.values()))

    def routable_count(self, pool: PoolName) -> int:
        return sum(1 for w in self._workers.values() if w.pool == pool and w.routable)

    def describe(self) -> dict[str, object]:
        now = self._clock()
        stale = self._config.load_reports.stale_after_s
        pools: dict[str, object] = {}
        for name, spec in self.specs.items():
            members = [w for w in self._workers.values() if w.pool == name]
            pools[name.value] = {
                "profile": spec.profile_path,
                "max_num_seqs": spec.max_num_seqs,
                "slots_per_worker": spec.slots_per_worker,
                "routable_workers": sum(1 for w in members if w.routable),
                "capacity_slots": sum(w.slots for w in members if w.routable),
                "inflight": sum(w.inflight for w in members),
                "workers": [w.describe(now, stale) for w in members],
            }
        return {"pools": pools}

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
            slots=self.specs[pool].slots_per_worker,
            managed=managed,
            drained=worker_id in self._drained_ids,
            state_since=self._clock(),
        )
        if existing is not None:
            # Same id, new address (a pod rescheduled): in-flight requests keep their
            # lease on the old object and release it there; the new one starts clean
            # (voices replayed before it is routable) under the same id, so its metric
            # series and operator drain carry over.
            existing.set_state(WorkerState.STOPPED, self._clock(), "replaced")
            self._cancel_prepare(worker_id)
            worker.restarts = existing.restarts + 1
        self._workers[worker_id] = worker
        if existing is not None:
            self._notify_restarted(worker, "address_changed")
            self._capacity_changed()
        log.info("worker %s added to %s at %s", worker_id, pool.value, url, extra={"worker": worker_id, "pool": pool.value})

    def remove_worker(self, worker_id: str) -> None:
        worker = self._workers.pop(worker_id, None)
        if worker is None:
            return
        worker.set_state(WorkerState.STOPPED, self._clock(), "removed")
        self._cancel_prepare(worker_id)
        self._capacity_changed()

    def worker_restarting(self, worker_id: str) -> None:
        worker = self._workers.get(worker_id)
        if worker is None:
            return
        self._cancel_prepare(worker_id)
        worker.answered = False
        worker.reported_load = None
        worker.reported_at = None
        worker.process_start_time = None
        was_ready = worker.state is WorkerState.READY
        if worker.set_state(WorkerState.STARTING, self._clock(), "process restarting"):
            if was_ready:
                for listener in self._ejection_listeners:
                    listener(worker, "process_exit")
            worker.restarts += 1
            self._notify_restarted(worker, "process_exit")
            self._capacity_changed()

    def worker_restarted(self, worker: Worker, why: str) -> None:
        """The process behind a worker that looked up all along was replaced (a new start
        time, or registered voices gone): it is a new worker. Not routable until its voices
        are replayed (and it is warmed); what was learned about the old process is reset."""
        if self._workers.get(worker.worker_id) is not worker or worker.state not in (
            WorkerState.READY,
            WorkerState.EJECTED,
        ):
            return  # gone, or already being prepared (which replays the voices anyway)
        self._cancel_prepare(worker.worker_id)
        worker.reported_load = None
        worker.reported_at = None
        worker.consecutive_failures = 0
        worker.restarts += 1
        worker.set_state(WorkerState.STARTING, self._clock(), f"restarted behind its address ({why})")
        self._notify_restarted(worker, why)
        self._capacity_changed()
        if worker.answered:
            self._start_prepare(worker)  # it answers already: replay now, not at the next probe

    def _notify_restarted(self, worker: Worker, why: str) -> None:
        log.warning(
            "worker %s restarted (%s): treated as new until its voices are replayed",
            worker.worker_id, why, extra={"worker": worker.worker_id, "pool": worker.pool.value},
        )  # fmt: skip
        for listener in self._restart_listeners:
            try:
                listener(worker, why)
            except Exception:  # a subscriber's bug must not leave the worker half-reset
                log.exception("restart listener failed for %s", worker.worker_id)

    def worker_failed(self, worker_id: str, reason: str) -> None:
        worker = self._workers.get(worker_id)
        if worker is None:
            return
        self._cancel_prepare(worker_id)
        worker.last_error = reason
        if worker.set_state(WorkerState.FAILED, self._clock(), reason):
            self._capacity_changed()

    # ---- leases -------------------------------------------------------------------
    def lease(self, worker_id: str) -> Lease:
        return Lease(self._workers[worker_id], self._lease_released)

    def _lease_released(self, worker: Worker) -> None:
        worker.note_release(self._clock())
        self._capacity_changed()

    # ---- what the health checker and the relay saw ----------------------------------
    def has_answered(self, worker_id: str) -> bool:
        """Whether the worker answered /health since it (re)started: the supervisor's
        start timeout ends there, warm-up time is not held against it."""
        worker = self._workers.get(worker_id)
        return worker is not None and worker.answered

    def probe_succeeded(self, worker: Worker) -> None:
        worker.answered = True
        worker.consecutive_failures = 0
        if worker.state in (WorkerState.STARTING, WorkerState.EJECTED):
            self._start_prepare(worker)

    def probe_failed(self, worker: Worker, why: str) -> None:
        if worker.state in (WorkerState.FAILED, WorkerState.STOPPED):
            # A probe sent before the supervisor gave up ends after it: its ConnectTimeout
            # must not replace the reason the worker failed (start timeout, crash loop).
            return
        worker.last_error = why
        if worker.state is WorkerState.READY:
            self._count_failure(worker, "health_probe")
        elif worker.state is WorkerState.EJECTED:
            worker.ejected_at = self._clock()  # half-open probe failed: wait another period

    def request_succeeded(self, worker: Worker) -> None:
        worker.consecutive_failures = 0

    def request_failed(self, worker: Worker, kind: str, detail: str, ejecting: bool) -> None:
        """A relay attempt failed. Only transport faults (connection errors, timeouts, 500,
        502, 504, cut streams) count toward ejection: never a 4xx, 429 or 503, which say
        the request or the moment was wrong, not the worker."""
        worker.last_error = f"{kind}: {detail}"
        if kind == UpstreamErrorKind.VOICE_MISSING:
            # The gateway only names voices it registered, so the worker lost them: it
            # restarted faster than the probes noticed (or missed a fan-out).
            self.worker_restarted(worker, "voices_missing")
            return
        if ejecting and worker.state is WorkerState.READY:
            self._count_failure(worker, "request_failures")

    def _count_failure(self, worker: Worker, reason: str) -> None:
        worker.consecutive_failures += 1
        if worker.consecutive_failures >= self._config.health.eject_after_failures:
            if worker.set_state(WorkerState.EJECTED, self._clock(), reason):
                for listener in self._ejection_listeners:
                    listener(worker, reason)
                self._capacity_changed()

    def due_for_half_open(self, worker: Worker) -> bool:
        return (
            worker.state is WorkerState.EJECTED
            and worker.ejected_at is not None
            and self._clock() - worker.ejected_at >= self._config.health.half_open_after_s
        )

    # ---- readiness: voices + warm-up before routable -----------------------------------
    def _start_prepare(self, worker: Worker) -> None:
        if worker.worker_id in self._preparing:
            return
        task = asyncio.get_running_loop().create_task(self._prepare_then_ready(worker))
        self._preparing[worker.worker_id] = task
        task.add_done_callback(lambda _t, wid=worker.worker_id: self._preparing.pop(wid, None))

    async def _prepare_then_ready(self, worker: Worker) -> None:
        try:
            if self._prepare is not None:
                await self._prepare(worker)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # stays unready; the next good probe tries again
            worker.last_error = f"prepare: {exc}"
            log.warning("worker %s not ready: %s", worker.worker_id, exc, extra={"worker": worker.worker_id})
            return
        if self._workers.get(worker.worker_id) is not worker:
            return  # removed or replaced while preparing
        if worker.state in (WorkerState.STARTING, WorkerState.EJECTED):
            worker.consecutive_failures = 0
            worker.set_state(WorkerState.READY, self._clock(), "healthy and prepared")
            self._capacity_changed()

    def _cancel_prepare(self, worker_id: str) -> None:
        task = self._preparing.pop(worker_id, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._preparing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- operator drain (persisted by DrainStore, applied here) -----------------------
    def set_drained(self, worker_id: str, drained: bool) -> Worker:
        worker = self._workers[worker_id]
        if drained:
            self._drained_ids.add(worker_id)
        else:
            self._drained_ids.discard(worker_id)
        worker.drained = drained
        log.info("worker %s %s by operator", worker_id, "drained" if drained else "undrained", extra={"worker": worker_id})
        self._capacity_changed()
        return worker

    def apply_drained(self, drained_ids: Iterable[str]) -> None:
        """Follow the drained set another replica wrote (workers not known yet included)."""
        self._drained_ids = set(drained_ids)
        changed = False
        for worker in self._workers.values():
            drained = worker.worker_id in self._drained_ids
            if worker.drained != drained:
                worker.drained = drained
                changed = True
        if changed:
            self._capacity_changed()
