"""Whose fault a failed worker attempt was, and what the client is told about it.

A failure counts toward a worker's ejection only when it is the worker's. Otherwise any
client could take the fleet down: a real worker answers some bad requests (a reference
URL it cannot fetch, a budget too small for any audio) the way it answers its own
breakdowns, and three such requests retried on a second worker would eject both.

* **worker**: a transport fault (refused, reset, cut, silent, a proxy's 502/504): counted
  now; another worker may serve the request.
* **moment**: 503 (starting, overloaded): another worker may serve it; never counted.
* **request**: the worker refused the request (400, 413, 422), or failed on what the
  request brought (a ``ref_audio`` URL it could not fetch, a clip over its size limit):
  the client gets a 4xx; no retry; never counted.
* **lost voice**: a 400 for a voice the gateway registered: the worker restarted unseen;
  another worker may serve it while this one is prepared again (the fleet's job).
* **configuration**: 404 (model name) or any other 4xx: the gateway and its workers
  disagree; the client gets a 502; no retry; never counted.
* **undecided**: what one answer cannot settle: any other 500, a 200 with no audio, and
  silence from a worker that had to fetch a ``ref_audio`` URL first. Another worker tries;
  if it serves the request the first worker is counted (``Relay`` does it); if it fails
  the same way (``repeated``), the request is to blame: a 4xx, nobody counted; if nothing
  settles it, nobody is counted either.

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
    ref_audio_fetch_failure,
    worker_error_message,
    worker_lost_a_voice,
)

RETRY_AFTER_S = 1


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
        return Verdict(UpstreamErrorKind.STATUS_5XX, Blame.UNDECIDED, detail, _generation_failed(), f"500 {message}")
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
        UpstreamErrorKind.STREAM_ERROR, Blame.UNDECIDED, "the worker ended the stream without audio", _generation_failed(), "no audio"
    )


def judge_silence(payload: dict[str, Any], detail: str = "no audio before the first-byte timeout") -> Verdict:
    """No audio before ``upstream.first_byte_timeout_s``. A worker that fetches a reference
    URL first may be waiting on that URL's host (vLLM tries it three times), not stuck."""
    blame = Blame.UNDECIDED if _fetches_ref_audio(payload) else Blame.WORKER
    error = GatewayError(504, "No worker produced audio in time.", code="upstream_timeout")
    return Verdict(UpstreamErrorKind.FIRST_BYTE_TIMEOUT, blame, detail, error, "silence")


def judge_transport(error: UpstreamError, payload: dict[str, Any]) -> Verdict:
    """Refused, reset, cut or silent before the first byte: the worker's (or its network's)."""
    if error.kind is UpstreamErrorKind.READ_TIMEOUT:  # silence, whoever noticed it
        return judge_silence(payload, error.detail or "the worker went silent")
    return Verdict(error.kind, Blame.WORKER, error.detail or error.kind.value, _generation_failed())


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
    if _fetches_ref_audio(payload):
        return bad_request(
            "ref_audio: two workers failed on this request while fetching or reading the reference audio at that URL. "
            "Check that the URL serves a 1-30 s audio clip the workers can reach, or send it as a data: URI.",
            "ref_audio",
            code="ref_audio_unusable",
        )
    if verdict.signature == "no audio":
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
