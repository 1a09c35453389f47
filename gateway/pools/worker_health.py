"""What the health checker and the relay saw, turned into ejections, half-open probes
and restarts noticed behind an address.

Only transport faults count toward ejection (connection errors, timeouts, 500, 502, 504,
cut streams): never a 4xx, 429 or 503, which say the request or the moment was wrong,
not the worker. Two signs of a stopped worker eject it at once instead of after
``health.eject_after_failures``: a 500 saying its engine died, and a refused connection
right after it failed a request it had taken (the released worker stops listening once
its engine is dead). Its in-flight requests that had no byte yet are the relay's to retry.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.config import HealthConfig
from gateway.pools.events import FleetEvents
from gateway.pools.members import Members
from gateway.pools.readiness import Readiness
from gateway.pools.worker import Worker
from gateway.types import WorkerState
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.types.labels import EjectionReason, RestartReason


class WorkerHealth:
    def __init__(
        self,
        members: Members,
        readiness: Readiness,
        events: FleetEvents,
        config: HealthConfig,
        clock: Callable[[], float],
    ) -> None:
        self._members = members
        self._readiness = readiness
        self._events = events
        self._config = config
        self._clock = clock
        # Whether an ejected worker that answered its half-open probe may be prepared now;
        # False: the gate re-tests it itself and calls ``readmit`` (gateway.quality).
        self._gate: Callable[[Worker], bool] | None = None

    def set_readmission_gate(self, gate: Callable[[Worker], bool]) -> None:
        self._gate = gate

    def readmit(self, worker: Worker) -> None:
        """The gate's re-test passed: prepared and routable again, as after a good half-open probe."""
        if worker.state is WorkerState.EJECTED and self._members.is_current(worker):
            self._readiness.start(worker)

    def has_answered(self, worker_id: str) -> bool:
        """Whether the worker answered /health since it (re)started: the supervisor's
        start timeout ends there, warm-up time is not held against it."""
        worker = self._members.get(worker_id)
        return worker is not None and worker.answered

    def probe_succeeded(self, worker: Worker) -> None:
        worker.answered_probe()
        if worker.state is WorkerState.EJECTED and self._gate is not None and not self._gate(worker):
            worker.wait_half_open_again(self._clock())  # the gate's re-test is this half-open's probe
            return
        if worker.state in (WorkerState.STARTING, WorkerState.EJECTED):
            self._readiness.start(worker)

    def probe_failed(self, worker: Worker, why: str) -> None:
        if worker.state in (WorkerState.FAILED, WorkerState.STOPPED):
            # A probe sent before the supervisor gave up ends after it: its ConnectTimeout
            # must not replace the reason the worker failed (start timeout, crash loop).
            return
        worker.note_error(why)
        if worker.state is WorkerState.READY:
            self._count_failure(worker, EjectionReason.HEALTH_PROBE)
        elif worker.state is WorkerState.EJECTED:
            worker.wait_half_open_again(self._clock())  # half-open probe failed: wait another period

    def due_for_half_open(self, worker: Worker) -> bool:
        return (
            worker.state is WorkerState.EJECTED
            and worker.ejected_at is not None
            and self._clock() - worker.ejected_at >= self._config.half_open_after_s
        )

    def request_succeeded(self, worker: Worker) -> None:
        worker.request_succeeded()

    def failed_after_arrival(self, worker: Worker, detail: str, engine_dead: bool) -> None:
        """The worker took a request and failed it (a 500, a stream cut or empty, silence).
        Whose fault that was is settled later (``upstream.blame``), but a worker that said its
        engine died serves nothing more: out of routing now, not after more failures."""
        worker.mark_failed_after_arrival()
        if engine_dead:
            self._eject_now(worker, EjectionReason.ENGINE_DEAD, detail)

    def request_failed(self, worker: Worker, kind: UpstreamErrorKind, detail: str, ejecting: bool) -> None:
        """A relay attempt failed; ``ejecting`` says whether it was the worker's fault."""
        worker.note_error(f"{kind}: {detail}")
        if kind == UpstreamErrorKind.CONNECT and worker.failed_after_arrival:
            # Refused right after failing what it had taken: the process stopped listening.
            self._eject_now(worker, EjectionReason.STOPPED_LISTENING, detail)
            return
        if kind in (UpstreamErrorKind.STREAM_ERROR, UpstreamErrorKind.READ_TIMEOUT):
            worker.mark_failed_after_arrival()  # a stream cut after audio (told with its StreamEnded)
        if kind == UpstreamErrorKind.VOICE_MISSING:
            # The gateway only names voices it registered, so the worker lost them: it
            # restarted faster than the probes noticed (or missed a fan-out).
            self.worker_restarted(worker, RestartReason.VOICES_MISSING)
            return
        if ejecting and worker.state is WorkerState.READY:
            self._count_failure(worker, EjectionReason.REQUEST_FAILURES)

    def quality_failed(self, worker: Worker, detail: str) -> None:
        """Its audio fell below the quality floor (gateway.quality): out of routing now. Its
        half-open probe is the quality gate's re-test (``set_readmission_gate``)."""
        self._eject_now(worker, EjectionReason.QUALITY, detail)

    def worker_restarted(self, worker: Worker, why: RestartReason) -> None:
        """The process behind a worker that looked up all along was replaced (a new start
        time, or registered voices gone): it is a new worker. Not routable until its voices
        are replayed (and it is warmed); what was learned about the old process is reset."""
        if not self._members.is_current(worker) or worker.state not in (WorkerState.READY, WorkerState.EJECTED):
            return  # gone, or already being prepared (which replays the voices anyway)
        self._readiness.cancel(worker.worker_id)
        worker.restarted_behind_address(self._clock(), why)
        self._events.restarted(worker, why)
        self._events.capacity_changed()
        if worker.answered:
            self._readiness.start(worker)  # it answers already: replay now, not at the next probe

    def _eject_now(self, worker: Worker, reason: EjectionReason, detail: str) -> None:
        if worker.eject(reason, detail, self._clock()):
            self._events.ejected(worker, reason)
            self._events.capacity_changed()

    def _count_failure(self, worker: Worker, reason: EjectionReason) -> None:
        if worker.count_failure(reason, self._config.eject_after_failures, self._clock()):
            self._events.ejected(worker, reason)
            self._events.capacity_changed()
