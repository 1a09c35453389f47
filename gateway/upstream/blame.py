"""Whose fault a failed worker attempt was, and what the client is told about it.

One rule: **a failure that follows the request is the request's.** A failure counts toward a
worker's ejection only when it does not follow the request. Otherwise any client could
take the fleet down: a real worker answers some bad requests (a prompt over its model
length, a reference URL it cannot fetch, a budget too small for any audio) the way it
answers its own breakdowns, and three such requests retried on a second worker would eject
both.

* **worker**: the request never reached a worker process (refused, unreachable, closed
  before any answer, a proxy's 502/504): it cannot follow the request. Counted now;
  another worker may serve the request.
* **moment**: 503 (starting, overloaded): another worker may serve it; never counted.
* **request**: the worker refused the request (400, 413, 422), or failed on what the
  request brought (a ``ref_audio`` URL it could not fetch, a clip over its size limit):
  the client gets a 4xx; no retry; never counted.
* **lost voice**: a 400 for a voice the gateway registered: the worker restarted unseen;
  another worker may serve it while this one is prepared again (the fleet's job).
* **configuration**: 404 (model name) or any other 4xx: the gateway and its workers
  disagree; the client gets a 502; no retry; never counted.
* **undecided**: the request reached the worker, which failed before any audio in a way
  one answer cannot settle: a 500 (its engine's death included), a 200 with no audio, a
  200 cut before the first byte, silence. Its count is deferred: another worker tries;
  if it serves the request the first worker is counted (``Relay`` does it); if it fails
  the same way (``repeated``), the failure followed the request: nobody is counted, no
  third attempt, and the client gets a 4xx (or the 5xx of a fleet in trouble where the
  failure says nothing against the request: silence, dead engines); if nothing settles
  it, nobody is counted either.

What the client is told never includes a worker id, a worker's address or what a worker
said: ``Verdict.detail`` keeps that for the log (``GatewayError.log_detail``).
The cases and their tests are in docs/reliability.md ("Whose fault").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from gateway.errors import GatewayError, bad_request
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.upstream.errors import UpstreamError
from gateway.upstream.worker_errors import (
    FetchFailure,
    engine_died,
    prompt_over_model_length,
    ref_audio_fetch_failure,
    worker_error_message,
    worker_lost_a_voice,
)

RETRY_AFTER_S = 1

# Signatures of undecided failures: two attempts that fail with equal ones "failed the same way".
NO_AUDIO = "no audio"
CUT = "cut before audio"
SILENCE = "silence"
ENGINE_DEAD = "engine dead"


class Blame(Enum):
    WORKER = "worker"
    MOMENT = "moment"
    REQUEST = "request"
    LOST_VOICE = "lost_voice"
    CONFIGURATION = "configuration"
    UNDECIDED = "undecided"


# Another worker may serve a request that failed this way (before its first byte).
_RETRYABLE = frozenset({Blame.WORKER, Blame.MOMENT, Blame.LOST_VOICE, Blame.UNDECIDED})


@dataclass(frozen=True, slots=True)
class Verdict:
    """One failed attempt, judged: how it failed, whose fault, what the client would see."""

    kind: UpstreamErrorKind  # the ``kind`` label of higgs_gateway_upstream_errors_total
    blame: Blame
    detail: str  # what the worker answered or did: for the log and the worker's last_error
    client_error: GatewayError  # if no other attempt follows
    signature: str = ""  # "failed the same way" means equal signatures

    @property
    def retryable(self) -> bool:
        return self.blame in _RETRYABLE


# ---- judging one attempt --------------------------------------------------------------------
def judge_status(status: int, body: bytes, payload: dict[str, Any]) -> Verdict:
    """A worker's non-200 answer. The one rule for which statuses another worker may hide."""
    message, param = worker_error_message(body)
    detail = f"{status}: {message}"
    if status == 500:
        failure = ref_audio_fetch_failure(message) if _fetches_ref_audio(payload) else None
        if failure is not None:
            return Verdict(UpstreamErrorKind.REQUEST_FAULT, Blame.REQUEST, detail, _unusable_ref_audio(failure))
        # The message, not the body: the body's request_id differs between two workers.
        signature = ENGINE_DEAD if engine_died(message) else f"500 {message}"
        return Verdict(UpstreamErrorKind.STATUS_5XX, Blame.UNDECIDED, detail, _generation_failed(), signature)
    if status >= 500 and status != 503:
        return Verdict(UpstreamErrorKind.STATUS_5XX, Blame.WORKER, detail, _generation_failed())
    if status == 503:
        return Verdict(UpstreamErrorKind.STATUS_5XX, Blame.MOMENT, detail, _busy())
    if status in (400, 422) and worker_lost_a_voice(message):
        return Verdict(UpstreamErrorKind.VOICE_MISSING, Blame.LOST_VOICE, detail, _voice_unavailable())
    if status in (400, 422):
        return Verdict(UpstreamErrorKind.STATUS_4XX, Blame.REQUEST, detail, _refused(message, param, payload))
    if status == 413:
        error = GatewayError(413, "The request is larger than the workers accept.", code="payload_too_large")
        return Verdict(UpstreamErrorKind.STATUS_4XX, Blame.REQUEST, detail, error)
    # 404 (the served model name) and the rest: the gateway's configuration and its
    # workers disagree. Not the client's doing, and not something another try fixes.
    error = GatewayError(
        502, "The workers refused the gateway's request; the gateway is misconfigured.", code="upstream_misconfigured"
    )
    return Verdict(UpstreamErrorKind.STATUS_4XX, Blame.CONFIGURATION, detail, error)


def judge_no_audio() -> Verdict:
    """A 200 whose stream ended without a byte of audio."""
    return Verdict(
        UpstreamErrorKind.STREAM_ERROR, Blame.UNDECIDED, "the worker ended the stream without audio", _generation_failed(), NO_AUDIO
    )


def judge_silence(detail: str = "no audio before the first-byte timeout") -> Verdict:
    """No audio before ``upstream.first_byte_timeout_s``. It may follow the request (a
    reference URL whose host does not answer, a prompt slow to prefill), so it is undecided."""
    error = GatewayError(504, "No worker produced audio in time.", code="upstream_timeout")
    return Verdict(UpstreamErrorKind.FIRST_BYTE_TIMEOUT, Blame.UNDECIDED, detail, error, SILENCE)


def judge_transport(error: UpstreamError) -> Verdict:
    """A transport failure before the first byte. Refused or closed before any answer: the
    worker's (the request never reached it). Cut after its answer began, or silent: the
    request reached the worker, which may have failed on it (the released worker answers a
    prompt over its model length with a 200 and then a stream cut before any byte), so
    undecided."""
    detail = error.detail or error.kind.value
    if error.kind in (UpstreamErrorKind.READ_TIMEOUT, UpstreamErrorKind.FIRST_BYTE_TIMEOUT):  # silence, whoever noticed it
        return judge_silence(detail)
    if error.kind is UpstreamErrorKind.STREAM_ERROR:
        return Verdict(error.kind, Blame.UNDECIDED, detail, _generation_failed(), CUT)
    return Verdict(error.kind, Blame.WORKER, detail, _generation_failed())


def repeated(earlier: list[Verdict], latest: Verdict, payload: dict[str, Any]) -> Verdict:
    """``latest`` judged again knowing the undecided failures before it: the same failure
    on a second worker is the request's, not two workers'."""
    if latest.blame is not Blame.UNDECIDED:
        return latest
    if not any(v.blame is Blame.UNDECIDED and v.signature == latest.signature for v in earlier):
        return latest
    return replace(
        latest, kind=UpstreamErrorKind.REQUEST_FAULT, blame=Blame.REQUEST, client_error=_failed_twice(latest, payload)
    )


# ---- what the client is told ----------------------------------------------------------------
def _fetches_ref_audio(payload: dict[str, Any]) -> bool:
    ref_audio = payload.get("ref_audio")
    return isinstance(ref_audio, str) and ref_audio[:8].lower().startswith(("http://", "https://"))


def _unusable_ref_audio(failure: FetchFailure) -> GatewayError:
    if failure is FetchFailure.TOO_LARGE:
        return bad_request(
            "ref_audio: the file at that URL is larger than the workers accept; use a shorter clip (1-30 s).",
            "ref_audio",
            code="ref_audio_too_large",
        )
    return bad_request(
        "ref_audio: the workers could not fetch that URL (unreachable, or it answered with an error). "
        "Use a URL the workers can reach, or send the audio as a data: URI.",
        "ref_audio",
        code="ref_audio_unreachable",
    )


def _failed_twice(verdict: Verdict, payload: dict[str, Any]) -> GatewayError:
    if verdict.signature == ENGINE_DEAD:
        # Dead engines are the fleet's trouble whatever killed them: a 5xx, no third try.
        return GatewayError(502, "Two workers stopped while serving this request; retry shortly.", code="upstream_error")
    if _fetches_ref_audio(payload):
        return bad_request(
            "ref_audio: two workers failed on this request while fetching or reading the reference audio at that URL. "
            "Check that the URL serves a 1-30 s audio clip the workers can reach, or send it as a data: URI.",
            "ref_audio",
            code="ref_audio_unusable",
        )
    if verdict.signature == SILENCE:
        # Two workers slow past the first-byte timeout says more about the fleet's load
        # than about the request: the fleet's 504, but still no third try and no count.
        return GatewayError(
            504, "Two workers produced no audio for this request in time; retry shortly.", code="upstream_timeout"
        )
    if verdict.signature == CUT:
        return bad_request(
            "Two workers broke off this request before any audio, as they do with a prompt longer than "
            "their model length: shorten input or ref_text, or use a shorter reference clip.",
            None,
            code="unservable_request",
        )
    if verdict.signature == NO_AUDIO:
        param = "max_new_tokens" if payload.get("max_new_tokens") is not None else "input"
        return bad_request(
            "Two workers produced no audio for this request. Give it more text to speak"
            + (" or a larger max_new_tokens." if param == "max_new_tokens" else "."),
            param,
            code="no_audio",
        )
    return bad_request(
        "Two workers failed on this request the same way, so it is the request they cannot serve: "
        "check its input, voice, ref_audio and ref_text.",
        None,
        code="unservable_request",
    )


def _refused(message: str, param: str | None, payload: dict[str, Any]) -> GatewayError:
    """A worker's 400 in the gateway's words; the gateway checks most fields itself, so
    this is rare. Only a field the client sent is named."""
    field = param if param in payload else None
    lowered = message.lower()
    if lowered.startswith("reference audio too"):
        return bad_request("ref_audio must hold 1-30 s of speech.", "ref_audio", code="invalid_ref_audio")
    if prompt_over_model_length(message):
        return bad_request(
            "The prompt is longer than the workers' model length: shorten input or ref_text, "
            "or use a shorter reference clip.",
            "input",
            code="prompt_too_long",
        )
    if field is None and "ref_audio" in payload and "ref_audio" in lowered:
        field = "ref_audio"
    named = f" (check {field})" if field else ""
    return bad_request(f"The workers refused this request as invalid{named}.", field, code="rejected_by_worker")


def _generation_failed() -> GatewayError:
    return GatewayError(502, "The workers could not generate this speech; retry shortly.", code="upstream_error")


def _busy() -> GatewayError:
    return GatewayError(
        503, "Workers are busy or starting; retry shortly.", code="upstream_unavailable",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )  # fmt: skip


def _voice_unavailable() -> GatewayError:
    return GatewayError(
        503, "The voice is being restored on the workers; retry shortly.", param="voice", code="voice_unavailable",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )  # fmt: skip
