"""The one place that writes metrics and the access log.

A speech request is recorded once, when it ends: its ``RequestRecord``, filled in along
the way (admission's decision and wait, the relay's ``AttemptLog``, the outcome), becomes
the request's event series, each attempt's stream observation (passed on to the routing's
performance model) and its access-log line. Admission and the relay never call the
recorder; only live gauges move earlier (the key's stream gauge, as the stream opens and
closes; the fleet's gauges are read at scrape time). The fleet and the shared state report
their own events here as they happen. Adding a metric is ``metrics.py`` (the series) plus
a line here (when it moves).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway.access_log import AccessLog, AccessRecord
from gateway.metrics import FleetSnapshot, GatewayMetrics, PlannerGauges, WorkerSnapshot
from gateway.planner.planner import FleetPlanner
from gateway.pools.availability import PoolAvailability
from gateway.pools.view import FleetView
from gateway.pools.worker import Worker
from gateway.routing.admission import Admission
from gateway.routing.performance import EMPTY_SNAPSHOT, PerformanceModel
from gateway.routing.thresholds import ThresholdStore, effective_thresholds
from gateway.security.auth import KeyIdentity
from gateway.supervisor.profile_change import ProfileChange
from gateway.types import PoolName, SlaClass, WorkerState
from gateway.types.codec import BYTES_PER_SECOND
from gateway.types.curve import Curve
from gateway.types.labels import EjectionReason, KeyResult, RejectReason, RestartReason
from gateway.types.observations import AttemptLog, StreamObservation, StreamObserver, StreamOutcome


@dataclass(slots=True)
class RequestRecord:
    """One speech request as the pipeline fills it in; recorded once, when it ends."""

    request_id: str
    sla_class: SlaClass = SlaClass.BALANCED
    started: float = field(default_factory=time.perf_counter)
    key: KeyIdentity | None = None  # the API key that sent it, when keys are configured
    pool: str | None = None  # where its audio came from; None: never reached a worker
    worker: str | None = None
    reason: str | None = None  # the routing reason
    queue_wait_s: float | None = None  # time in admission; None: never left it with an answer
    rejected: str | None = None  # admission's reason for turning it away
    attempts: AttemptLog = field(default_factory=AttemptLog)  # what the relay did
    ttfp_s: float | None = None  # start to the first byte sent to the client
    pcm_bytes: int = 0
    retries: int = 0
    error: str | None = None  # a short error code, never a worker's message
    disconnect_phase: str | None = None
    trace_id: str | None = None  # the trace it belongs to (recorded here, or the caller's)
    # From the request body, once parsed.
    model: str | None = None
    response_format: str | None = None
    stream_format: str | None = None
    input_text: str | None = None

    def first_byte_sent(self) -> None:
        if self.ttfp_s is None:
            self.ttfp_s = time.perf_counter() - self.started


class Recorder:
    def __init__(
        self,
        metrics: GatewayMetrics,
        access_log: AccessLog,
        stream_observers: Sequence[StreamObserver] = (),
    ) -> None:
        self.metrics = metrics
        self._access_log = access_log
        # The routing's performance model learns here (and tests listen in).
        self._streams = tuple(stream_observers)

    # ---- API keys ---------------------------------------------------------------------
    def key_checked(self, key: KeyIdentity, result: KeyResult, sla_class: SlaClass | None) -> None:
        """Once per request with a key: admitted, or refused by one of its tier's limits.

        ``sla_class`` is None for a voice session's handshake: sessions are never counted
        in requests_total, so their refusals stay out of rejections_total (whose rate
        over requests the alerts read) and show in key_requests only."""
        self.metrics.key_requests_by(*self._key_series(key), result.value).inc()
        if sla_class is None:
            return
        if result is KeyResult.RATE_LIMITED:
            self.metrics.rejections_by(sla_class.value, RejectReason.RATE_LIMITED.value).inc()
        elif result is KeyResult.STREAM_LIMITED:
            self.metrics.rejections_by(sla_class.value, RejectReason.STREAM_LIMITED.value).inc()

    # ---- voice sessions (gateway.sessions' SessionObserver) ------------------------------
    def session_opened(self) -> None:
        self.metrics.sessions_open.inc()

    def session_closed(self, reason: str) -> None:
        self.metrics.sessions_open.dec()
        self.metrics.sessions.labels(reason).inc()

    def utterance_started(self) -> None:
        self.metrics.session_utterances.inc()

    def sentence_routed(self, pool: PoolName, reason: str) -> None:
        self.metrics.session_sentences.labels(pool.value, reason).inc()

    def utterance_first_audio(self, seconds: float) -> None:
        self.metrics.session_first_audio.observe(seconds)

    def sentence_gap(self, seconds: float) -> None:
        self.metrics.session_gap.observe(seconds)

    def barge_in(self, seconds: float) -> None:
        self.metrics.session_barge_ins.observe(seconds)

    def audio_buffered(self, delta_bytes: int) -> None:
        self.metrics.session_buffered_audio.inc(delta_bytes)

    def key_stream_opened(self, key: KeyIdentity) -> None:
        self.metrics.key_streams_by(*self._key_series(key)).inc()

    def key_stream_closed(self, key: KeyIdentity) -> None:
        self.metrics.key_streams_by(*self._key_series(key)).dec()

    def _key_series(self, key: KeyIdentity) -> tuple[str, ...]:
        return self.metrics.key_series(key.tier, key.label)

    # ---- fleet ------------------------------------------------------------------------
    def worker_ejected(self, worker: Worker, reason: EjectionReason) -> None:
        self.metrics.worker_ejections.labels(worker.pool.value, reason).inc()

    def worker_restarted(self, worker: Worker, reason: RestartReason) -> None:
        """A new process behind a worker id."""
        self.metrics.worker_restarts.labels(worker.pool.value, reason).inc()

    # ---- profile changes (supervisor.profile_changes: the ChangeObserver) ---------------
    def profile_change_started(self, change: ProfileChange) -> None:
        self.metrics.profile_change_in_progress.labels(change.source.value, change.target.value).set(1)

    def profile_change_finished(self, change: ProfileChange) -> None:
        source, target = change.source.value, change.target.value
        self.metrics.profile_change_in_progress.labels(source, target).set(0)
        if change.result is not None:
            self.metrics.profile_changes.labels(source, target, change.result).inc()

    def load_tracking_fallback(self, worker: Worker) -> None:
        """A worker's /load never counted: its load is read from /metrics from now on."""
        self.metrics.load_tracking_fallbacks.labels(worker.pool.value).inc()

    # ---- the shared state (StateObserver) -------------------------------------------
    def state_backend_up(self, backend: str, up: bool) -> None:
        self.metrics.state_backend_up.labels(backend).set(1 if up else 0)

    def state_rate_limit_unavailable(self, mode: str) -> None:
        self.metrics.state_rate_limit_unavailable.labels(mode).inc()

    def state_change_applied(self, kind: str) -> None:
        self.metrics.state_changes_applied.labels(kind).inc()

    # ---- the request: once, at its end --------------------------------------------------
    def request_done(self, record: RequestRecord, status: int) -> None:
        duration = time.perf_counter() - record.started
        audio_s = record.pcm_bytes / BYTES_PER_SECOND
        metrics = self.metrics
        sla = record.sla_class  # a StrEnum is its own label value (``.value`` is a call on 3.11)
        self.upstream_done(sla, record.queue_wait_s, record.rejected, record.attempts)
        metrics.observe_request(
            sla_class=sla,
            pool=record.pool,
            status=status,
            duration_s=duration,
            ttfp_s=record.ttfp_s,
            audio_s=audio_s,
        )
        if record.disconnect_phase is not None:
            metrics.client_disconnects_by(record.disconnect_phase).inc()
        if record.key is not None and audio_s > 0:
            metrics.key_audio_seconds_by(*self._key_series(record.key)).inc(audio_s)
        if not self._access_log.enabled:
            return
        self._access_log.log(
            AccessRecord(
                request_id=record.request_id,
                sla_class=record.sla_class.value,
                status=status,
                duration_ms=duration * 1000,
                pool=record.pool,
                worker=record.worker,
                reason=record.reason,
                ttfp_ms=None if record.ttfp_s is None else record.ttfp_s * 1000,
                audio_s=audio_s,
                model=record.model,
                response_format=record.response_format,
                stream_format=record.stream_format,
                input_chars=None if record.input_text is None else len(record.input_text),
                retries=record.retries,
                error=record.error,
                key_id=record.key.key_id if record.key is not None else None,
                trace_id=record.trace_id,
                input_text=record.input_text if self._access_log.log_input_text else None,
            )
        )

    def upstream_done(self, sla: SlaClass, queue_wait_s: float | None, rejected: str | None, log: AttemptLog) -> None:
        """What admission and the relay did for one upstream request (a speech request's,
        or a voice session's sentence), once it ended: its wait in admission, a refusal,
        every placement, upstream failure and retry, and each attempt's stream observation
        (on to the performance model)."""
        metrics = self.metrics
        if queue_wait_s is not None:
            metrics.admission_wait_by(sla).observe(queue_wait_s)
        if rejected is not None:
            metrics.rejections_by(sla, rejected).inc()
        for decision in log.decisions:
            if decision.pool is not None:
                metrics.routing_decisions_by(sla, decision.pool, decision.reason).inc()
        for pool, kind in log.errors:
            metrics.upstream_errors_by(pool, kind).inc()
        for reason in log.retries:
            metrics.retries_by(reason).inc()
        for observation in log.streams:
            self._stream_done(observation)

    def _stream_done(self, observation: StreamObservation) -> None:
        if observation.outcome is StreamOutcome.COMPLETED:
            pool = observation.pool
            if observation.predicted_ttfp_s and observation.ttfp_s is not None:
                ratio = observation.ttfp_s / observation.predicted_ttfp_s
                self.metrics.prediction_ratio_by(pool, "ttfp").observe(ratio)
            if observation.predicted_rtf:
                observed_rtf = observation.observed_rtf
                if observed_rtf is not None:
                    self.metrics.prediction_ratio_by(pool, "rtf").observe(observed_rtf / observation.predicted_rtf)
        for observer in self._streams:
            observer.on_stream_done(observation)

    # ---- live gauges, read at scrape time ---------------------------------------------
    def watch_fleet(
        self,
        fleet: FleetView,
        admission: Admission,
        thresholds: ThresholdStore,
        clock: Callable[[], float],
        performance: PerformanceModel | None = None,
        availability: PoolAvailability | None = None,
    ) -> None:
        def snapshot() -> FleetSnapshot:
            now = clock()
            pools = availability.current() if availability is not None else None
            curves = performance.snapshot() if performance is not None else EMPTY_SNAPSHOT  # a read, never a refit
            workers = [
                WorkerSnapshot(
                    pool=w.pool.value,
                    worker=w.worker_id,
                    inflight=w.inflight,
                    reported_load=w.reported_load,
                    up=w.routable,
                    report_age_s=None if w.reported_at is None else now - w.reported_at,
                    slots=w.slots,
                    curve=_curve_points(curves.curve(w.worker_id, w.pool)),
                )
                for w in fleet.workers
                if w.state is not WorkerState.STOPPED
            ]
            return FleetSnapshot(
                workers=workers,
                queue_depths={sla.value: depth for sla, depth in admission.queue_depths().items()},
                thresholds=effective_thresholds(thresholds.thresholds(), fleet.snapshot()),
                empty_pool_seconds=pools.empty_for_s if pools is not None else {},
                degraded=pools.degraded if pools is not None else False,
            )

        self.metrics.set_snapshot_provider(snapshot)


    def watch_planner(self, planner: FleetPlanner) -> None:
        """The planner's gauges: read from its published plan at scrape time."""

        def gauges() -> PlannerGauges:
            plan = planner.snapshot()
            sizing = plan.sizing
            rates = {} if plan.arrivals is None else {sla.value: a.rate for sla, a in plan.arrivals.classes.items()}
            if sizing is None:
                return PlannerGauges(judged=plan.judged, arrival_rates=rates)
            return PlannerGauges(
                judged=plan.judged,
                desired={pool.value: count for pool, count in sizing.workers.items()},
                bound_by={pool.value: bound.value for pool, bound in sizing.bound_by.items()},
                margin=sizing.margin,
                arrival_rates=rates,
            )

        self.metrics.set_planner_provider(gauges)


# Loads the learned curves are exported at: few, so the series stay low-cardinality.
CURVE_LOADS = (1, 2, 4, 8, 16, 32, 64)


def _curve_points(curve: Curve | None) -> dict[int, tuple[float, float]]:
    if curve is None:
        return {}
    return {load: (curve.rtf(load), curve.ttfp(load)) for load in CURVE_LOADS if load <= curve.max_load}
