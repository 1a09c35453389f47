"""The one place that writes metrics and the access log.

What happened upstream is heard as it happens: the recorder subscribes to the relay's
events (``upstream.events``), one per attempt (its placement, its failure, the retry it
was) and one per stream end (its observation, passed on to the routing's performance
model, and the prediction errors). A speech request itself is recorded once, when it
ends: its ``RequestRecord`` (admission's wait or refusal, the outcome) becomes the
request's series and its access-log line; a session's sentence gives its admission here
the same way (``admission_done``). The fleet and the shared state report their own
events here as they happen; the gauges read at scrape time are wired in the composition
root (``app.py``). Adding a metric is ``metrics.py`` (the series) plus a line here, in
the event or record that already carries what it counts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.access_log import AccessLog, AccessRecord
from gateway.metrics import GatewayMetrics
from gateway.supervisor.profile_change import ProfileChange
from gateway.types import PoolName, SlaClass
from gateway.types.codec import BYTES_PER_SECOND
from gateway.types.labels import EjectionReason, KeyResult, RejectReason, RestartReason
from gateway.types.observations import StreamObserver, StreamOutcome
from gateway.types.records import KeyIdentity
from gateway.types.records import RequestRecord as RequestRecord  # re-exported: the pipeline fills it in
from gateway.upstream.events import AttemptEnded, StreamEnded, UpstreamWorker


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
    def worker_ejected(self, worker: UpstreamWorker, reason: EjectionReason) -> None:
        self.metrics.worker_ejections.labels(worker.pool.value, reason).inc()

    def worker_restarted(self, worker: UpstreamWorker, reason: RestartReason) -> None:
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

    def load_tracking_fallback(self, worker: UpstreamWorker) -> None:
        """A worker's /load never counted: its load is read from /metrics from now on."""
        self.metrics.load_tracking_fallbacks.labels(worker.pool.value).inc()

    # ---- the shared state (StateObserver) -------------------------------------------
    def state_backend_up(self, backend: str, up: bool) -> None:
        self.metrics.state_backend_up.labels(backend).set(1 if up else 0)

    def fleet_view_shared(self, shared: bool) -> None:
        """Routing counts every replica's leases (True) or only this one's plus reports."""
        self.metrics.fleet_view_shared.set(1 if shared else 0)

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
        self.admission_done(sla, record.queue_wait_s, record.rejected)
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

    def admission_done(self, sla: SlaClass, queue_wait_s: float | None, rejected: str | None) -> None:
        """What admission did for one upstream request (a speech request's, or a voice
        session's sentence), once it ended: its wait, or its refusal."""
        if queue_wait_s is not None:
            self.metrics.admission_wait_by(sla).observe(queue_wait_s)
        if rejected is not None:
            self.metrics.rejections_by(sla, rejected).inc()

    # ---- the relay's events (upstream.events): once per attempt, once per stream end -----
    def attempt_ended(self, event: AttemptEnded) -> None:
        metrics, decision = self.metrics, event.decision
        if decision.pool is not None:
            metrics.routing_decisions_by(event.request.sla_class, decision.pool, decision.reason).inc()
        if event.retry_of is not None:
            metrics.retries_by(event.retry_of).inc()
        if event.failure is not None:
            metrics.upstream_errors_by(event.worker.pool, event.failure.kind).inc()

    def stream_ended(self, event: StreamEnded) -> None:
        observation = event.observation
        if event.cut is not None:
            self.metrics.upstream_errors_by(observation.pool, event.cut).inc()
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
