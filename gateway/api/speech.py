"""``POST /v1/audio/speech``: the speech pipeline, in the order a request goes through it.

auth (rate, concurrent streams) -> SLA headers -> admission precheck -> body -> payload ->
upstream call (admission -> relay) -> encoder -> response, with the recorder and the
request's trace told once how it ended. The order matters: capacity is checked before the
body is read (a flood is turned away cheaply). The ``UpstreamCall`` owns the worker's slot
from admission to its ``close`` (``upstream.call``); this module only delivers its bytes,
and ``_Delivery.finish`` is the one place a streamed request ends.

One ``RequestRecord`` goes down the walk: admission's answer (decision, wait, or the
refusal) and the outcome are written into it, and it is handed to the recorder once, at
the end. What each attempt did reaches the recorder as the relay's events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Protocol

from starlette.requests import Request
from starlette.responses import Response

from gateway.api.access import ApiKeyGate, KeyStream, voice_owner
from gateway.api.body import read_json_body
from gateway.api.errors import as_gateway_error, error_response
from gateway.api.relay_response import ClientGone, DisconnectWatch, RelayResponse, StreamCut
from gateway.api.sla import parse_sla_headers
from gateway.api.speech_request import SpeechRequest, parse_speech_request
from gateway.audio.delay import FirstAudioDelays
from gateway.audio.encoder import StreamEncoder
from gateway.audio.formats import STREAMING_HEADERS, AudioFormat, response_media_type
from gateway.audio.sse import sse_delta, sse_done, sse_error
from gateway.errors import GatewayError
from gateway.recorder import Recorder, RequestRecord
from gateway.pools.affinity import ReferenceAffinity, reference_key
from gateway.pools.lease import Lease
from gateway.routing.admission import Admission, AdmissionRejected
from gateway.telemetry.propagation import PassThroughTracing
from gateway.telemetry.tracing import RecordedRequest, SpeechTracing
from gateway.types import POOL_HEADER, PREDICTED_RTF_HEADER, PREDICTED_TTFP_HEADER, ROUTE_REASON_HEADER, PoolName
from gateway.types.codec import BYTES_PER_SECOND, FRAMES_PER_SECOND
from gateway.types.labels import DisconnectPhase
from gateway.types.observations import StreamOutcome
from gateway.types.view import RequestInfo
from gateway.upstream.errors import UpstreamError
from gateway.upstream.call import Upstream, UpstreamCall
from gateway.worker_payload import WorkerPayloads

log = logging.getLogger("higgs_gateway.speech")

CLIENT_CLOSED = 499  # nginx's convention for "the client went away first"


class EncoderFactory(Protocol):
    def __call__(self, fmt: AudioFormat, speed: float = 1.0, sample_rate: int | None = None) -> StreamEncoder: ...


SPEECH_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": SpeechRequest.model_json_schema(ref_template="#/components/schemas/{model}")}},
    }
}


# Response headers as bytes, built once rather than per request.
_POOL, _REASON = POOL_HEADER.lower().encode(), ROUTE_REASON_HEADER.lower().encode()
_PREDICTED_TTFP, _PREDICTED_RTF = PREDICTED_TTFP_HEADER.lower().encode(), PREDICTED_RTF_HEADER.lower().encode()
_POOL_VALUES = {None: b"none", **{pool: pool.value.encode() for pool in PoolName}}
_CONTENT_TYPES = {(fmt, sse): response_media_type(fmt, sse).encode() for fmt in AudioFormat for sse in (False, True)}
_STREAMING = tuple((name.lower().encode(), value.encode()) for name, value in STREAMING_HEADERS.items())


class SpeechPipeline:
    def __init__(
        self,
        auth: ApiKeyGate,
        admission: Admission[Lease],
        payloads: WorkerPayloads,
        upstream: Upstream,
        encoders: EncoderFactory,
        recorder: Recorder,
        max_body_bytes: int,
        body_timeout_s: float | None = None,
        tracing: SpeechTracing | None = None,
        allow_pool_pin: bool = False,
        affinity: ReferenceAffinity | None = None,
        first_audio: FirstAudioDelays | None = None,
    ) -> None:
        self._auth = auth
        self._admission = admission
        self._payloads = payloads
        self._upstream = upstream
        self._encoders = encoders
        self._recorder = recorder
        self._max_body_bytes = max_body_bytes
        self._allow_pool_pin = allow_pool_pin
        self._affinity = affinity or ReferenceAffinity(0)  # 0 entries: never a hint
        self._body_timeout_s = body_timeout_s
        # Spans when tracing is configured; otherwise only the headers workers get.
        self._tracing = tracing or PassThroughTracing()
        # The gateway's own delay to first audio per format and speed: predicted, then learned.
        self._first_audio = first_audio or FirstAudioDelays()

    async def handle(self, request: Request, request_id: str) -> Response:
        """Never raises: every refusal is an OpenAI envelope, and every request is recorded."""
        # Counted from the first line: refusals (auth, bad headers, bad body) are requests too.
        record = RequestRecord(request_id)
        started = self._tracing.start(request.headers.raw, request_id)
        record.trace_id, trace = started.trace_id, started.spans
        try:
            return await self._serve(request, record, started.headers, trace)
        except ClientGone:
            routed = record.reason is not None
            record.disconnect_phase = DisconnectPhase.BEFORE_FIRST_BYTE if routed else DisconnectPhase.QUEUED
            self._recorder.request_done(record, CLIENT_CLOSED)
            if trace is not None:
                trace.finish(CLIENT_CLOSED, record)
            return Response(status_code=CLIENT_CLOSED)
        except Exception as exc:  # refusals: auth, headers, body, admission, voices, upstream
            error = as_gateway_error(exc)
            record.error = (error.code or type(exc).__name__) if isinstance(exc, GatewayError) else type(exc).__name__
            if isinstance(exc, AdmissionRejected):
                record.rejected, record.queue_wait_s = exc.reason, exc.waited_s
            if error.log_detail:
                # What the workers said stays here, tied to the request id; the client got the envelope.
                log.warning(
                    "request %s answered %d %s: %s", request_id, error.status, error.code, error.log_detail,
                    extra={"request_id": request_id},
                )  # fmt: skip
            self._recorder.request_done(record, error.status)
            if trace is not None:
                trace.finish(error.status, record)
            return error_response(error)

    async def _serve(
        self, request: Request, record: RequestRecord, headers: Mapping[str, str], trace: RecordedRequest | None
    ) -> Response:
        # The key's concurrent-stream hold is taken first and released however the request
        # ends: here when it ends before audio flows, by the delivery's ``finish`` after.
        key_stream = await self._auth.open_speech(request.headers)
        record.key = key_stream.key
        try:
            return await self._admitted(request, record, key_stream, headers, trace)
        except BaseException:
            await key_stream.close()
            raise

    async def _admitted(
        self, request: Request, record: RequestRecord, key_stream: KeyStream, worker_headers: Mapping[str, str],
        trace: RecordedRequest | None,
    ) -> Response:  # fmt: skip
        sla = parse_sla_headers(request.headers, self._allow_pool_pin)
        record.sla_class = sla.sla_class
        # Cheap rejection before reading a body: full queue (429) or no worker at all (503).
        self._admission.precheck(sla.sla_class)
        speech = parse_speech_request(await read_json_body(request, self._max_body_bytes, self._body_timeout_s))
        record.model, record.input_text = speech.model, speech.input
        delivery_format = speech.delivery(self._payloads.raw_stream_models)
        record.response_format, record.stream_format = speech.response_format.value, delivery_format
        fields = await self._payloads.check(speech.fields)
        payload = self._payloads.build(fields, speech.input, owner=voice_owner(key_stream.key))
        reference = reference_key(payload, self._payloads.is_uploaded_voice(payload.get("voice")))
        own_delay_s = self._first_audio.predict(speech.response_format, speech.tempo, speech.sample_rate)
        info = RequestInfo(
            sla.sla_class, sla.ttfp_budget_ms, len(speech.input), pool_pin=sla.pool_pin, gateway_delay_s=own_delay_s,
            warm_workers=self._affinity.warm_workers(reference),
            reference_s=self._payloads.reference_seconds(payload) if reference is not None else None,
        )  # fmt: skip
        watch = DisconnectWatch(request.receive)
        call = self._upstream.call(info, payload, worker_headers, trace)
        try:
            with watch.guard():
                await call.open()  # owns the slot from admission on, and frees it if this fails
            first_chunk_at = time.perf_counter()  # the worker's first chunk is in hand
            encoder = self._encoders(speech.response_format, speech.tempo, sample_rate=speech.sample_rate)
            if trace is not None:
                encoder = trace.encoding(encoder, speech.response_format)
        except BaseException:
            watch.close()
            _admitted_as(record, call)
            await call.close(StreamOutcome.ERROR)  # opened, but the encoder could not be; else a no-op
            raise
        _admitted_as(record, call)
        worker = call.worker
        record.pool, record.worker = worker.pool.value, worker.worker_id
        self._affinity.served(worker.worker_id, reference)  # it encoded (or had) the codes
        hidden = call.stream.hidden_failures if call.stream is not None else ()
        if hidden:
            log.info(
                "request %s served by %s after: %s", record.request_id, worker.worker_id,
                "; ".join(hidden), extra={"request_id": record.request_id},
            )  # fmt: skip
        first_audio = _FirstAudio(self._first_audio, speech, own_delay_s, first_chunk_at)
        delivery = _Delivery(
            self._recorder, record, call, encoder, speech, delivery_format == "sse", key_stream, trace, first_audio,
        )  # fmt: skip
        return RelayResponse(delivery.body(), delivery.headers(), watch, delivery.client_left, delivery.finish)


def _admitted_as(record: RequestRecord, call: UpstreamCall) -> None:
    """What admission and the relay settled, into the record: the placement, the wait, the retries."""
    if call.decision is not None:
        record.reason = call.decision.reason
    record.queue_wait_s = call.waited_s if call.waited_s is not None else record.queue_wait_s
    record.retries = call.retries


class _FirstAudio:
    """The gateway's own delay to this request's first audio: predicted, then measured."""

    __slots__ = ("_delays", "_since", "_speech", "predicted_s")

    def __init__(self, delays: FirstAudioDelays, speech: SpeechRequest, predicted_s: float, since: float) -> None:
        self._delays, self._speech, self.predicted_s, self._since = delays, speech, predicted_s, since

    def sent(self) -> None:
        speech = self._speech
        self._delays.observe(speech.response_format, speech.tempo, time.perf_counter() - self._since, speech.sample_rate)


class _Delivery:
    """One admitted request's audio: worker chunks -> encoder -> client, and how it ended."""

    def __init__(
        self,
        recorder: Recorder,
        record: RequestRecord,
        call: UpstreamCall,
        encoder: StreamEncoder,
        speech: SpeechRequest,
        sse: bool,
        key_stream: KeyStream,
        trace: RecordedRequest | None,
        first_audio: _FirstAudio,
    ) -> None:
        self._first_audio = first_audio
        self._key_stream = key_stream
        self._recorder = recorder
        self._record = record
        self._call = call
        self._encoder = encoder
        self._speech = speech
        self._trace = trace
        self._sse = sse
        self._status = 200
        self._outcome = StreamOutcome.COMPLETED
        self._done = False

    def headers(self) -> list[tuple[bytes, bytes]]:
        decision = self._call.decision
        assert decision is not None
        headers = [
            (b"content-type", _CONTENT_TYPES[self._speech.response_format, self._sse]),
            (_POOL, _POOL_VALUES[decision.pool]),
            (_REASON, decision.reason.encode()),
        ]
        if decision.predicted_ttfp_s is not None and decision.predicted_rtf is not None:
            # What the client will see: the worker's first packet plus the gateway's own delay.
            predicted_s = decision.predicted_ttfp_s + self._first_audio.predicted_s
            headers.append((_PREDICTED_TTFP, b"%.0f" % (predicted_s * 1000)))
            headers.append((_PREDICTED_RTF, b"%.3f" % decision.predicted_rtf))
        headers += _STREAMING
        return headers

    async def body(self) -> AsyncGenerator[bytes, None]:
        call, encoder, record, sse = self._call, self._encoder, self._record, self._sse
        rest = call.rest
        assert rest is not None
        # Bound once: this loop runs per chunk.
        next_chunk, count, encode = rest.__anext__, call.count, encoder.encode
        chunk = call.first_chunk
        try:
            while True:
                out = encode(chunk)
                if out:
                    if record.ttfp_s is None:
                        record.first_byte_sent()
                        self._first_audio.sent()
                    yield sse_delta(out) if sse else out
                try:
                    # The transport bounds the silence between chunks (upstream.read_timeout_s).
                    chunk = await next_chunk()
                except StopAsyncIteration:
                    break
                count(len(chunk))
            await call.worker_finished()
            tail = encoder.finish()
            if tail:
                record.first_byte_sent()
                yield sse_delta(tail) if sse else tail
            if sse:
                yield sse_done(self._usage())
            self._done = True
        except UpstreamError as exc:
            # Bytes already reached the client: no retry. SSE ends with an error event; a raw
            # stream is cut (no terminating chunk) so the client cannot mistake it for a whole clip.
            kind = call.failed_mid_stream(exc)
            self._status, self._outcome, record.error = 502, StreamOutcome.CUT, kind.value
            self._done = True
            if not sse:
                raise StreamCut(kind.value) from exc
            partial = record.ttfp_s is not None  # some audio already reached the client
            yield sse_error("The worker failed mid-stream; the audio is incomplete.", code="upstream_error", partial_audio=partial)

    def client_left(self) -> None:
        if self._done:
            return  # everything was sent; the client closing now changes nothing
        self._status, self._outcome = CLIENT_CLOSED, StreamOutcome.CLIENT_DISCONNECTED
        self._record.disconnect_phase = DisconnectPhase.STREAMING

    async def finish(self) -> None:
        self._encoder.close()
        try:
            await self._call.close(self._outcome)
        finally:
            await self._key_stream.close()
        self._record.pcm_bytes = self._call.received_bytes
        self._record.retries = self._call.retries
        self._recorder.request_done(self._record, self._status)
        if self._trace is not None:
            self._trace.finish(self._status, self._record)

    def _usage(self) -> dict[str, int]:
        # Workers report token usage only on whole-file answers; on the PCM stream we
        # relay, the output is one token per codec frame and the input is estimated.
        output_tokens = round(self._call.received_bytes / BYTES_PER_SECOND * FRAMES_PER_SECOND)
        input_tokens = max(1, (len(self._speech.input) + 3) // 4)
        return {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens}
