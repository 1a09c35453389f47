"""The blame rule, case by case: whose fault each worker answer is and what the client sees.

docs/reliability.md ("Whose fault") lists the same cases.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.upstream.blame import Blame, judge_no_audio, judge_silence, judge_status, judge_transport, repeated
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.upstream.errors import UpstreamError

PLAIN: dict[str, Any] = {"model": "m", "input": "Hello."}
WITH_URL: dict[str, Any] = {**PLAIN, "ref_audio": "https://clips.example/anna.wav"}
WORKER_ID = "low_latency@pod-7"


def worker_body(status: int, message: str, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "X", "param": param, "code": status}})


def assert_told_nothing_of_the_worker(message: str, *upstream: str) -> None:
    assert WORKER_ID not in message and "http" not in message
    for text in upstream:
        assert text not in message


@pytest.mark.parametrize(
    ("status", "blame", "client_status", "code"),
    [
        (502, Blame.WORKER, 502, "upstream_error"),
        (504, Blame.WORKER, 502, "upstream_error"),
        (501, Blame.WORKER, 502, "upstream_error"),
        (503, Blame.MOMENT, 503, "upstream_unavailable"),
        (500, Blame.UNDECIDED, 502, "upstream_error"),
        (404, Blame.CONFIGURATION, 502, "upstream_misconfigured"),
        (401, Blame.CONFIGURATION, 502, "upstream_misconfigured"),
        (400, Blame.REQUEST, 400, "rejected_by_worker"),
        (422, Blame.REQUEST, 400, "rejected_by_worker"),
        (413, Blame.REQUEST, 413, "payload_too_large"),
    ],
)
def test_one_rule_for_every_status(status: int, blame: Blame, client_status: int, code: str) -> None:
    said = f"secret worker text {status}"
    verdict = judge_status(status, worker_body(status, said), PLAIN)
    assert verdict.blame is blame
    assert verdict.retryable is (blame in (Blame.WORKER, Blame.MOMENT, Blame.UNDECIDED))
    assert (verdict.client_error.status, verdict.client_error.code) == (client_status, code)
    assert said in verdict.detail, "what the worker said is kept for the log"
    assert_told_nothing_of_the_worker(verdict.client_error.message, said)


def test_a_lost_voice_is_the_workers_state_not_the_clients_mistake() -> None:
    verdict = judge_status(400, worker_body(400, "Unknown voice 'anna'. Upload it first.", "voice"), PLAIN)
    assert verdict.blame is Blame.LOST_VOICE and verdict.kind is UpstreamErrorKind.VOICE_MISSING and verdict.retryable
    assert verdict.client_error.status == 503 and "Retry-After" in verdict.client_error.headers


def test_a_worker_refusal_names_only_a_field_the_client_sent() -> None:
    verdict = judge_status(400, worker_body(400, "seed is odd", "seed"), {**PLAIN, "seed": 3})
    assert verdict.client_error.param == "seed" and "seed" in verdict.client_error.message
    other = judge_status(400, worker_body(400, "x", "internal.thing"), PLAIN)
    assert other.client_error.param is None
    short = judge_status(400, worker_body(400, "Reference audio too short (0.4s)."), WITH_URL)
    assert short.client_error.param == "ref_audio" and "1-30 s" in short.client_error.message


@pytest.mark.parametrize(
    ("said", "code"),
    [
        ("Speech generation failed: Failed to fetch media from URL: HTTP 404 error (parameter=image_url, value=https://clips.example/anna.wav)", "ref_audio_unreachable"),
        ("Speech generation failed: Cannot connect to host clips.example:443 ssl:default [Connect call failed]", "ref_audio_unreachable"),
        ("Speech generation failed: Maximum file size exceeded: HTTP response exceeded maximum size of 26214400 bytes", "ref_audio_too_large"),
    ],
)
def test_a_reference_url_the_worker_cannot_use_is_the_requests(said: str, code: str) -> None:
    verdict = judge_status(500, worker_body(500, said), WITH_URL)
    assert verdict.blame is Blame.REQUEST and not verdict.retryable
    assert verdict.kind is UpstreamErrorKind.REQUEST_FAULT
    error = verdict.client_error
    assert (error.status, error.param, error.code, error.type) == (400, "ref_audio", code, "invalid_request_error")
    assert_told_nothing_of_the_worker(error.message, said, "clips.example")


def test_fetch_words_without_a_url_in_the_request_settle_nothing() -> None:
    said = "Speech generation failed: Cannot connect to host x:1"
    assert judge_status(500, worker_body(500, said), PLAIN).blame is Blame.UNDECIDED


def test_what_reached_the_worker_is_undecided_what_never_did_is_the_workers() -> None:
    # Silence and a stream cut before any audio may follow the request (the released worker
    # cuts a 200 for a prompt over its model length): undecided. A refused or unanswered
    # connection cannot: the request never reached a worker process.
    assert judge_silence().blame is Blame.UNDECIDED and judge_silence().client_error.status == 504
    silent = judge_transport(UpstreamError(UpstreamErrorKind.READ_TIMEOUT, "the worker sent no answer in time"))
    assert silent.blame is Blame.UNDECIDED and silent.kind is UpstreamErrorKind.FIRST_BYTE_TIMEOUT
    cut = judge_transport(UpstreamError(UpstreamErrorKind.STREAM_ERROR, "Response payload is not completed"))
    assert cut.blame is Blame.UNDECIDED and cut.kind is UpstreamErrorKind.STREAM_ERROR and cut.retryable
    refused = judge_transport(UpstreamError(UpstreamErrorKind.CONNECT, "refused 10.0.0.7:8091"))
    assert refused.blame is Blame.WORKER and refused.client_error.status == 502
    assert_told_nothing_of_the_worker(refused.client_error.message, "10.0.0.7")


ENGINE_DEAD_BODY = orjson.dumps(
    {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
               "type": "InternalServerError", "param": None, "code": 500, "request_id": "speech-1", "error_stage_id": 0}}
)  # fmt: skip


def test_an_engine_death_is_judged_by_its_message_not_its_request_id() -> None:
    one = judge_status(500, ENGINE_DEAD_BODY, PLAIN)
    two = judge_status(500, ENGINE_DEAD_BODY.replace(b"speech-1", b"speech-2"), PLAIN)
    assert one.blame is Blame.UNDECIDED and one.retryable
    again = repeated([one], two, PLAIN)
    assert again.blame is Blame.REQUEST and not again.retryable, "no third engine for this request"
    assert (again.client_error.status, again.client_error.code) == (502, "upstream_error"), "dead engines are the fleet's"


def test_a_worker_400_for_a_prompt_over_the_model_length_names_the_input() -> None:
    said = "The decoder prompt (length 9001) is longer than the maximum model length of 8192. Make sure..."
    verdict = judge_status(400, worker_body(400, said), PLAIN)
    assert verdict.blame is Blame.REQUEST
    error = verdict.client_error
    assert (error.status, error.param, error.code) == (400, "input", "prompt_too_long")
    assert_told_nothing_of_the_worker(error.message, "9001")


@pytest.mark.parametrize(
    ("payload", "first", "param", "code"),
    [
        (PLAIN, lambda p: judge_no_audio(), "input", "no_audio"),
        ({**PLAIN, "max_new_tokens": 9}, lambda p: judge_no_audio(), "max_new_tokens", "no_audio"),
        (PLAIN, lambda p: judge_status(500, worker_body(500, "Speech generation failed: odd"), p), None, "unservable_request"),
        (WITH_URL, lambda p: judge_status(500, worker_body(500, "Speech generation failed:"), p), "ref_audio", "ref_audio_unusable"),
        (WITH_URL, lambda p: judge_silence(), "ref_audio", "ref_audio_unusable"),
        (PLAIN, lambda p: judge_transport(cut_before_audio()), None, "unservable_request"),
        (PLAIN, lambda p: judge_silence(), None, "upstream_timeout"),  # the fleet's 504: slow, not wrong
    ],
)
def test_the_same_failure_on_a_second_worker_is_the_requests(payload: dict[str, Any], first: Any, param: str | None, code: str) -> None:
    one, two = first(payload), first(payload)
    assert one.blame is Blame.UNDECIDED
    assert repeated([], one, payload) is one, "one worker's answer settles nothing"
    again = repeated([one], two, payload)
    assert again.blame is Blame.REQUEST and again.kind is UpstreamErrorKind.REQUEST_FAULT and not again.retryable
    status = 504 if code == "upstream_timeout" else 400
    assert (again.client_error.status, again.client_error.param, again.client_error.code) == (status, param, code)


def cut_before_audio() -> UpstreamError:
    return UpstreamError(UpstreamErrorKind.STREAM_ERROR, "Response payload is not completed")


def test_a_different_failure_on_the_second_worker_settles_nothing() -> None:
    one = judge_status(500, worker_body(500, "Speech generation failed: a"), PLAIN)
    two = judge_status(500, worker_body(500, "Speech generation failed: b"), PLAIN)
    assert repeated([one], two, PLAIN).blame is Blame.UNDECIDED
    assert repeated([one], judge_no_audio(), PLAIN).blame is Blame.UNDECIDED
    cut = judge_transport(cut_before_audio())
    assert repeated([one], cut, PLAIN) is cut
    assert repeated([cut], judge_no_audio(), PLAIN).blame is Blame.UNDECIDED
