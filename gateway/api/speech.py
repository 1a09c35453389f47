"""``POST /v1/audio/speech``: validate, admit, lease, relay, encode, account.

The order matters: capacity is checked before the body is read (a flood is turned away
cheaply), the lease is taken in the same event-loop step admission answers in (nobody
can steal the slot), and ``SpeechExchange.finish`` is the one idempotent place that
releases it and records the outcome, whatever way the request ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.api.errors import ApiError
from gateway.api.relay_response import ClientGone, DisconnectWatch, RelayResponse, StreamCut
from gateway.api.sla import parse_sla_headers
from gateway.api.speech_request import SpeechRequest, parse_speech_request
from gateway.audio.encoder import StreamEncoder
from gateway.audio.formats import STREAMING_HEADERS, response_media_type
from gateway.audio.sse import sse_delta, sse_done, sse_error
from gateway.routing.admission import AdmissionRejected
from gateway.routing.model import Decision, RequestInfo
from gateway.types import BYTES_PER_SECOND, DROPPED_REASON_HEADER, POOL_HEADER, ROUTE_REASON_HEADER, SlaClass
from gateway.upstream.relay import OpenStream
from gateway.upstream.transport import UpstreamError

if TYPE_CHECKING:
    from gateway.runtime import Gateway

log = logging.getLogger("higgs_gateway.speech")
router = APIRouter()

CLIENT_CLOSED = 499  # nginx's convention for "the client went away first"
# Codec frames: 25 per second of audio; Higgs counts one output token per frame.
FRAMES_PER_SECOND = 25
SPEECH_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": SpeechRequest.model_json_schema(ref_template="#/components/schemas/{model}")}},
    }
}


class SpeechExchange:
    """One speech request's bookkeeping and its single cleanup owner."""

    def __init__(self, gateway: Gateway, request_id: str, sla_class: SlaClass) -> None:
        self.gateway = gateway
        self.request_id = request_id
        self.sla_class = sla_class
        self.started = time.perf_counter()
        self.decision: Decision | None = None
        self.stream: OpenStream | None = None
        self.ttfp_s: float | None = None
        self.pcm_bytes = 0
        self.speech: SpeechRequest | None = None
        self.error: str | None = None  # a short error code for the access log
        self.key_id: str | None = None
        self._finished = False

    @property
    def pool(self) -> str | None:
        return self.stream.lease.worker.pool.value if self.stream else None

    def refused(self, status: int, code: str | None) -> None:
        self.error = code
        self.finish(status)

    def first_byte_sent(self) -> None:
        if self.ttfp_s is None:
            self.ttfp_s = time.perf_counter() - self.started

    def finish(self, status: int, disconnect_phase: str | None = None) -> None:
        """Release the worker and record the outcome, exactly once."""
        if self._finished:
            return
        self._finished = True
        if self.stream is not None:
            self.stream.lease.release()
        duration = time.perf_counter() - self.started
        audio_s = self.pcm_bytes / BYTES_PER_SECOND
        worker = self.stream.lease.worker if self.stream else None
        self.gateway.record_request(
            request_id=self.request_id,
            sla_class=self.sla_class,
            pool=self.pool,
            worker=worker.worker_id if worker else None,
            reason=self.decision.reason if self.decision else None,
            status=status,
            duration_s=duration,
            ttfp_s=self.ttfp_s,
            audio_s=audio_s,
            disconnect_phase=disconnect_phase,
            speech=self.speech,
            retries=(self.stream.attempts - 1) if self.stream else 0,
            error=self.error,
            key_id=self.key_id,
        )

    def usage(self) -> dict[str, int]:
        # Workers report token usage only on whole-file answers; on the PCM stream we
        # relay, the output is one token per codec frame and the input is estimated.
        output_tokens = round(self.pcm_bytes / BYTES_PER_SECOND * FRAMES_PER_SECOND)
        chars = len(self.speech.input) if self.speech else 0
        input_tokens = max(1, (chars + 3) // 4)
        return {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}


@router.post("/v1/audio/speech", openapi_extra=SPEECH_OPENAPI, response_class=Response)
async def create_speech(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    # Counted from the first line: refusals (auth, bad headers, bad body) are requests too.
    exchange = SpeechExchange(gateway, request.state.request_id, SlaClass.BALANCED)
    try:
        return await _serve(request, gateway, exchange)
    except AdmissionRejected as exc:
        exchange.refused(exc.status, exc.reason)
        return _rejection(exc)
    except ClientGone:
        phase = "queued" if exchange.decision is None else "before_first_byte"
        exchange.finish(CLIENT_CLOSED, disconnect_phase=phase)
        return Response(status_code=CLIENT_CLOSED)
    except Exception as exc:  # ApiError, auth, voice and ref_audio refusals carry status and code
        exchange.refused(getattr(exc, "status", 500), getattr(exc, "code", None) or type(exc).__name__)
        raise


async def _serve(request: Request, gateway: Gateway, exchange: SpeechExchange) -> Response:
    exchange.key_id = await gateway.check_api_key(request)
    sla = parse_sla_headers(request.headers)
    exchange.sla_class = sla.sla_class
    # Cheap rejection before reading a body: full queue (429) or no worker at all (503).
    gateway.admission.precheck(sla.sla_class)
    body = await gateway.read_json_body(request)
    speech = exchange.speech = parse_speech_request(body)
    payload = gateway.prepare_worker_payload(speech)
    info = RequestInfo(sla.sla_class, sla.ttfp_budget_ms, len(speech.input))
    watch = DisconnectWatch(request.receive)
    try:
        with watch.guard():
            stream = await _open(gateway, exchange, info, payload)
        encoder = gateway.open_encoder(speech)
    except BaseException:
        watch.close()
        if exchange.stream is not None:
            await exchange.stream.close()  # opened, but the encoder could not be
        raise
    sse = speech.stream_format == "sse"
    headers = _response_headers(speech, sse, stream.decision)
    body = _relay_body(exchange, stream, encoder, sse)
    return RelayResponse(
        body, headers, watch, on_disconnect=lambda: exchange.finish(CLIENT_CLOSED, disconnect_phase="streaming")
    )


async def _open(gateway: Gateway, exchange: SpeechExchange, info: RequestInfo, payload: dict[str, object]) -> OpenStream:
    decision = await gateway.admission.admit(info)
    lease = gateway.take_lease(decision)  # same loop step as admit: the slot is ours
    exchange.decision = decision
    try:
        stream = await gateway.relay.open(lease, decision, payload, gateway.retry_picker(info))
    except BaseException:
        lease.release()  # idempotent; the relay released it already on its own failures
        raise
    exchange.decision = stream.decision
    exchange.stream = stream
    return stream


async def _relay_body(
    exchange: SpeechExchange, stream: OpenStream, encoder: StreamEncoder, sse: bool
) -> AsyncGenerator[bytes, None]:
    status = 200
    chunk = stream.first_chunk
    try:
        while True:
            exchange.pcm_bytes += len(chunk)
            out = encoder.encode(chunk)
            if out:
                exchange.first_byte_sent()
                yield sse_delta(out) if sse else out
            try:
                # The transport bounds the silence between chunks (upstream.read_timeout_s).
                chunk = await anext(stream.rest)
            except StopAsyncIteration:
                break
        tail = encoder.finish()
        if tail:
            exchange.first_byte_sent()
            yield sse_delta(tail) if sse else tail
        if sse:
            yield sse_done(exchange.usage())
    except UpstreamError as exc:
        # Bytes already reached the client: no retry. SSE ends with an error event; a raw
        # stream is cut (no terminating chunk) so the client cannot mistake it for a whole clip.
        status = 502
        kind = "read_timeout" if exc.kind == "read_timeout" else "stream_error"
        exchange.error = kind
        exchange.gateway.stream_failed(stream, kind, str(exc) or kind)
        if not sse:
            raise StreamCut(kind) from exc
        yield sse_error("The worker failed mid-stream; the audio is incomplete.", code="upstream_error")
    finally:
        encoder.close()
        await stream.close()
        exchange.finish(status)


def _response_headers(speech: SpeechRequest, sse: bool, decision: Decision) -> list[tuple[bytes, bytes]]:
    headers = [
        (b"content-type", response_media_type(speech.response_format, sse).encode()),
        (POOL_HEADER.encode(), (decision.pool.value if decision.pool else "none").encode()),
        (ROUTE_REASON_HEADER.encode(), decision.reason.encode()),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in STREAMING_HEADERS.items()]
    return headers


def _rejection(exc: AdmissionRejected) -> Response:
    return ApiError(
        exc.status,
        exc.message,
        code=exc.reason,
        type_="rate_limit_error" if exc.status == 429 else "server_error",
        headers={"Retry-After": str(exc.retry_after_s), DROPPED_REASON_HEADER: exc.reason},
    ).response()
