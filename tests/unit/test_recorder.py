"""The recorder: each request's record, each of the relay's events (and each fleet report) becomes the right series, the access line and the observers' call."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.access_log import ACCESS_LOGGER, AccessLog
from gateway.metrics import GatewayMetrics
from gateway.pools.worker import Worker
from gateway.recorder import Recorder, RequestRecord
from gateway.security.auth import KeyIdentity
from gateway.supervisor.profile_change import ProfileChange
from gateway.types import PoolName, SlaClass, reasons
from gateway.types.codec import BYTES_PER_SECOND, FRAMES_PER_SECOND
from gateway.types.decision import Action, Decision
from gateway.types.error_kinds import RetryReason, UpstreamErrorKind
from gateway.types.labels import NO_POOL, DisconnectPhase, EjectionReason, KeyResult, ProfileChangeResult, RestartReason
from gateway.types.observations import PaceSample, StreamObservation, StreamOutcome
from gateway.types.view import RequestInfo
from gateway.upstream import blame
from gateway.upstream.blame import Verdict
from gateway.upstream.events import AttemptEnded, StreamEnded

LL = PoolName.LOW_LATENCY
WORKER = Worker("ll-0", LL, "http://ll-0.test", slots=4)


class Observers:
    def __init__(self) -> None:
        self.seen: list[StreamObservation] = []

    def on_stream_done(self, observation: StreamObservation) -> None:
        self.seen.append(observation)


def recorder(access_log: bool = False) -> tuple[Recorder, Observers]:
    observers = Observers()
    return Recorder(GatewayMetrics(), AccessLog(enabled=access_log), [observers]), observers


def value(rec: Recorder, name: str, **labels: str) -> float:
    text = rec.metrics.render()[0].decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def observation(outcome: StreamOutcome = StreamOutcome.COMPLETED, **fields: object) -> StreamObservation:
    step = 0.02  # RTF 0.5
    pace = (PaceSample(2, FRAMES_PER_SECOND, FRAMES_PER_SECOND * step),)
    return StreamObservation("ll-0", LL, 2, 0.3, pace, outcome, BYTES_PER_SECOND, **fields)  # type: ignore[arg-type]


def attempt(decision: Decision, *, retry_of: RetryReason | None = None, failure: Verdict | None = None) -> AttemptEnded:
    request = RequestInfo(SlaClass.LATENCY, None, 10)
    return AttemptEnded(request, decision, WORKER, 1 if retry_of is None else 2, retry_of, 0.0, None, None, None, failure)


def ended(observation: StreamObservation, cut: UpstreamErrorKind | None = None) -> StreamEnded:
    return StreamEnded(RequestInfo(SlaClass.LATENCY, None, 10), WORKER, 1, observation, 1.0, cut)


def test_admission_answers_in_the_record_become_waits_and_rejections_and_attempts_decisions() -> None:
    rec, _ = recorder()
    routed = RequestRecord("req-1", SlaClass.LATENCY, pool="low_latency", worker="ll-0", queue_wait_s=0.02)
    refused = RequestRecord("req-2", SlaClass.THROUGHPUT, rejected=reasons.QUEUE_FULL)  # refused on arrival: no wait
    rec.attempt_ended(attempt(Decision(Action.ROUTE, reasons.FASTEST_TTFP, LL, "ll-0")))
    rec.request_done(routed, 200)
    rec.request_done(refused, 429)
    rec.key_checked(KeyIdentity("abc123", authenticated=True), KeyResult.RATE_LIMITED, SlaClass.BALANCED)
    assert value(rec, "higgs_gateway_admission_wait_seconds_count", sla_class="latency") == 1
    assert value(rec, "higgs_gateway_admission_wait_seconds_count", sla_class="throughput") == 0
    decisions = {"sla_class": "latency", "pool": "low_latency", "reason": reasons.FASTEST_TTFP}
    assert value(rec, "higgs_gateway_routing_decisions_total", **decisions) == 1
    assert value(rec, "higgs_gateway_rejections_total", sla_class="throughput", reason="queue_full") == 1
    assert value(rec, "higgs_gateway_rejections_total", sla_class="balanced", reason="rate_limited") == 1


def test_a_voice_session_refused_by_its_key_counts_in_key_requests_not_in_rejections() -> None:
    # Sessions never count in requests_total: a refusal in rejections_total would push
    # the rejection-rate alert with no request to weigh it against.
    rec, _ = recorder()
    key = KeyIdentity("abc123", authenticated=True)
    rec.key_checked(key, KeyResult.SESSION_LIMITED, None)
    rec.key_checked(key, KeyResult.RATE_LIMITED, None)
    counted = {
        (sample.name, sample.labels.get("result"))
        for family in text_string_to_metric_families(rec.metrics.render()[0].decode())
        for sample in family.samples
        if sample.value
    }
    assert ("higgs_gateway_key_requests_total", "session_limited") in counted
    assert ("higgs_gateway_key_requests_total", "rate_limited") in counted
    assert not any(name == "higgs_gateway_rejections_total" for name, _ in counted)


def test_the_relays_events_become_errors_retries_prediction_ratios_and_observations() -> None:
    rec, observers = recorder()
    first = Decision(Action.ROUTE, reasons.FASTEST_TTFP, LL, "ll-0")
    failed = observation(StreamOutcome.RETRIED)
    done = observation(predicted_ttfp_s=0.15, predicted_rtf=0.25)
    rec.attempt_ended(attempt(first, failure=blame.judge_status(500, b"boom", {})))
    rec.stream_ended(ended(failed))
    rec.attempt_ended(attempt(Decision(Action.ROUTE, reasons.RETRY_OTHER_WORKER, LL, "ll-1"), retry_of=RetryReason.STATUS_5XX))
    rec.stream_ended(ended(done))
    assert value(rec, "higgs_gateway_upstream_errors_total", pool="low_latency", kind="status_5xx") == 1
    assert value(rec, "higgs_gateway_retries_total", reason="status_5xx") == 1
    assert value(rec, "higgs_gateway_prediction_ratio_sum", pool="low_latency", quantity="ttfp") == pytest.approx(2.0)
    assert value(rec, "higgs_gateway_prediction_ratio_sum", pool="low_latency", quantity="rtf") == pytest.approx(2.0)
    assert observers.seen == [failed, done]  # the performance model hears every attempt, in order


def test_only_a_completed_stream_is_compared_with_its_prediction_and_a_cut_is_an_upstream_error() -> None:
    rec, observers = recorder()
    cut = observation(StreamOutcome.CUT, predicted_ttfp_s=0.15, predicted_rtf=0.25)
    rec.stream_ended(ended(cut, UpstreamErrorKind.STREAM_ERROR))
    assert value(rec, "higgs_gateway_prediction_ratio_count", pool="low_latency", quantity="ttfp") == 0
    assert value(rec, "higgs_gateway_upstream_errors_total", pool="low_latency", kind="stream_error") == 1
    assert observers.seen == [cut]


def test_fleet_reports_carry_their_reason_labels() -> None:
    rec, _ = recorder()
    rec.worker_ejected(WORKER, EjectionReason.REQUEST_FAILURES)
    rec.worker_restarted(WORKER, RestartReason.VOICES_MISSING)
    assert value(rec, "higgs_gateway_worker_ejections_total", pool="low_latency", reason="request_failures") == 1
    assert value(rec, "higgs_gateway_worker_restarts_total", pool="low_latency", reason="voices_missing") == 1


def test_a_profile_change_is_in_progress_then_counted_by_its_result() -> None:
    rec, _ = recorder()
    change = ProfileChange(LL, PoolName.HIGH_THROUGHPUT, "low_latency-0", "0", started_at=0.0)
    labels = {"from_pool": "low_latency", "to_pool": "high_throughput"}
    rec.profile_change_started(change)
    assert value(rec, "higgs_gateway_profile_change_in_progress", **labels) == 1
    change.result = ProfileChangeResult.COMPLETED
    rec.profile_change_finished(change)
    assert value(rec, "higgs_gateway_profile_change_in_progress", **labels) == 0
    assert value(rec, "higgs_gateway_profile_changes_total", **labels, result="completed") == 1
    assert value(rec, "higgs_gateway_profile_changes_total", **labels, result="drain_timeout") == 0


def test_a_finished_request_is_counted_once_with_its_audio_and_access_line(caplog: pytest.LogCaptureFixture) -> None:
    rec, _ = recorder(access_log=True)
    record = RequestRecord("req-1", SlaClass.LATENCY, pool="low_latency", worker="ll-0", reason=reasons.FASTEST_TTFP)
    record.first_byte_sent()
    record.pcm_bytes = 2 * BYTES_PER_SECOND
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        rec.request_done(record, 200)
    assert value(rec, "higgs_gateway_requests_total", sla_class="latency", pool="low_latency", status="200") == 1
    assert value(rec, "higgs_gateway_audio_seconds_total", pool="low_latency") == 2.0
    assert value(rec, "higgs_gateway_ttfp_seconds_count", sla_class="latency", pool="low_latency") == 1
    [line] = [r for r in caplog.records if r.name == ACCESS_LOGGER]
    assert line.request_id == "req-1" and line.status == 200 and line.worker == "ll-0"  # type: ignore[attr-defined]


def test_a_client_that_left_while_queued_counts_as_a_disconnect_without_a_pool() -> None:
    rec, _ = recorder()
    record = RequestRecord("req-2", SlaClass.THROUGHPUT, disconnect_phase=DisconnectPhase.QUEUED)
    rec.request_done(record, 499)
    assert value(rec, "higgs_gateway_requests_total", sla_class="throughput", pool=NO_POOL, status="499") == 1
    assert value(rec, "higgs_gateway_client_disconnects_total", phase="queued") == 1
    assert value(rec, "higgs_gateway_ttfp_seconds_count", sla_class="throughput", pool=NO_POOL) == 0
