"""OpenTelemetry spans for one speech request (only when tracing is on).

The speech pipeline starts one trace per request (``OtelTracing.start``); its spans are
told the request's steps by its ``UpstreamCall``: the wait in admission, each routing, and
the relay's events, one per attempt and one per stream end (``upstream.events``), from
whose times the attempt's phase spans are drawn. Recorded, a request is::

    POST /v1/audio/speech      SERVER: joins the caller's trace (W3C traceparent)
      admission                the wait for a slot
      route                    the decision: reason, pool, worker, predictions
      worker request           CLIENT, one per attempt: the traceparent the worker gets
        connect                  request sent until the worker's response headers
        first byte               until its first audio
        stream                   until the stream ends, however it ends
      encode                   first chunk encoded to the tail flushed; busy time inside

A voice session (``OtelTracing.session``) is one trace; each sentence it sends is a request
of its own, under the session's span, without the ``encode`` step (the session encodes)::

    GET /v1/audio/speech/stream   SERVER: the whole session, joins the handshake's traceparent
      sentence                    one per sentence sent: utterance, index, deadline, outcome
        admission, route, worker request (connect, first byte, stream)   as above

With tracing off nothing here runs: ``telemetry.propagation`` passes the request id and
the caller's ``traceparent`` on. A request the sampler leaves out costs its root span only:
it gets no spans object, so nothing else is told.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider, format_trace_id, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway import __version__
from gateway.audio.encoder import StreamEncoder
from gateway.telemetry.propagation import (
    TRACEPARENT,
    TRACESTATE,
    Started,
    UntracedSession,
    incoming_trace_headers,
    sentence_request_id,
)
from gateway.types import REQUEST_ID_HEADER, SPEECH_PATH, SPEECH_STREAM_PATH
from gateway.types.codec import BYTES_PER_SECOND
from gateway.types.decision import Decision
from gateway.types.records import RequestRecord, SentenceEnd, SessionSummary
from gateway.types.view import RequestInfo
from gateway.upstream.events import AttemptEnded, StreamEnded, UpstreamWorker

_PROPAGATOR = TraceContextTextMapPropagator()
SERVER_SPAN = f"POST {SPEECH_PATH}"
SESSION_SPAN = f"GET {SPEECH_STREAM_PATH}"  # the WebSocket handshake is a GET
SENTENCE_SPAN = "sentence"
INSTRUMENTATION = "higgs_gateway"
Clock = Callable[[], float]


class SessionTrace(Protocol):
    # The trace the session belongs to, for its last log line; None: none.
    trace_id: str | None

    def sentence(self, utterance: int, index: int, request: RequestInfo) -> Started[RecordedSentence]: ...
    def finish(self, summary: SessionSummary) -> None: ...


class SpeechTracing(Protocol):
    """``OtelTracing``, or ``propagation.PassThroughTracing`` when tracing is off."""

    def start(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> Started[RecordedRequest]: ...
    def session(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> SessionTrace: ...


class OtelTracing:
    """Spans through an OpenTelemetry tracer provider (the SDK's, built by ``otlp``, or a
    test's with an in-memory exporter). ``clock``: the relay's, whose event times the
    attempt phases are drawn from."""

    def __init__(self, provider: TracerProvider, clock: Clock = time.monotonic) -> None:
        self._tracer = provider.get_tracer(INSTRUMENTATION, __version__)
        self._clock = clock

    def start(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> Started[RecordedRequest]:
        root, traceparent = self._server_span(headers, "POST", SERVER_SPAN, SPEECH_PATH, request_id)
        if root.is_recording():
            spans = RecordedRequest(self._tracer, self._clock, root, request_id)
            return Started({REQUEST_ID_HEADER: request_id}, spans.trace_id, spans)
        # Sampled out: with a parent-based sampler nothing below it would be recorded, so no
        # child span is made at all (most of the cost); the worker still gets the trace.
        upstream = {REQUEST_ID_HEADER: request_id}
        _PROPAGATOR.inject(upstream, context=set_span_in_context(root))
        return Started(upstream, None if traceparent is None else traceparent[3:35])

    def session(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> SessionTrace:
        root, traceparent = self._server_span(headers, "GET", SESSION_SPAN, SPEECH_STREAM_PATH, request_id)
        if root.is_recording():
            return _RecordedSession(self._tracer, self._clock, root, request_id)
        upstream: dict[str, str] = {}  # sampled out: every sentence names the session's span
        _PROPAGATOR.inject(upstream, context=set_span_in_context(root))
        return UntracedSession(request_id, upstream, None if traceparent is None else traceparent[3:35])

    def _server_span(self, headers: Iterable[tuple[bytes, bytes]], method: str, name: str, route: str, request_id: str) -> tuple[Span, str | None]:
        """The SERVER span of a request or session, in the caller's trace when it sent one."""
        traceparent, tracestate = incoming_trace_headers(headers)
        carrier = {} if traceparent is None else {TRACEPARENT: traceparent}
        if tracestate is not None:
            carrier[TRACESTATE] = tracestate
        root = self._tracer.start_span(
            name,
            context=_PROPAGATOR.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "http.route": route, "url.path": route, "higgs.request_id": request_id},
        )
        return root, traceparent


class _RecordedUpstream:
    """A request's steps under its root span: admission, route, worker attempts (the
    ``upstream.call.CallTrace`` its call tells). The root is a request's SERVER span, or a
    session sentence's span."""

    def __init__(self, tracer: Tracer, clock: Clock, root: Span, request_id: str) -> None:
        self._tracer = tracer
        self._request_id = request_id
        self._root = root
        self._context = set_span_in_context(root)
        self._admission: _Span | None = None
        self._attempts: dict[int, _AttemptSpans] = {}
        self._wall = _WallTime(clock)  # one offset per request: its phases line up exactly
        self.trace_id: str | None = format_trace_id(root.get_span_context().trace_id)

    def admission_started(self) -> None:
        self._admission = self._tracer.start_span("admission", context=self._context)

    def routed(self, decision: Decision, retry: bool = False) -> None:
        if self._admission is not None:
            self._admission.end()
            self._admission = None
        attributes: dict[str, AttributeValue] = {"higgs.route.reason": decision.reason, "higgs.route.retry": retry}
        if decision.pool is not None:
            attributes["higgs.pool"] = decision.pool.value
        if decision.worker_id is not None:
            attributes["higgs.worker"] = decision.worker_id
        if decision.predicted_ttfp_s is not None:
            attributes["higgs.route.predicted_ttfp_ms"] = round(decision.predicted_ttfp_s * 1000, 1)
        if decision.predicted_rtf is not None:
            attributes["higgs.route.predicted_rtf"] = round(decision.predicted_rtf, 4)
        self._tracer.start_span("route", context=self._context, attributes=attributes).end()

    def attempt(self, worker: UpstreamWorker, number: int) -> Mapping[str, str]:
        spans = self._attempts[number] = _AttemptSpans(self._tracer, self._context, self._request_id, worker, number)
        return spans.headers

    def attempt_ended(self, event: AttemptEnded) -> None:
        spans = self._attempts.get(event.number)
        if spans is not None:
            spans.settled(event, self._wall)

    def stream_ended(self, event: StreamEnded) -> None:
        spans = self._attempts.pop(event.number, None)
        if spans is not None:
            spans.closed(event, self._wall)

    def _end_admission(self, outcome: str, failed: bool, detail: str | None) -> None:
        """Refused or abandoned while waiting: the admission span ends saying so."""
        if self._admission is None:
            return
        self._admission.set_attribute("higgs.admission.outcome", outcome)
        if failed:
            self._admission.set_status(Status(StatusCode.ERROR, detail))
        self._admission.end()
        self._admission = None


class RecordedRequest(_RecordedUpstream):
    def encoding(self, encoder: StreamEncoder, audio_format: str) -> StreamEncoder:
        return _TimedEncoder(encoder, self._tracer, self._context, audio_format)

    def finish(self, status: int, record: RequestRecord) -> None:
        root = self._root
        self._end_admission(record.error or record.disconnect_phase or str(status), status >= 500, record.error)
        root.set_attributes(_record_attributes(status, record))
        if status >= 500:  # a 4xx is the client's doing: not an error of this server span
            root.set_status(Status(StatusCode.ERROR, record.error))
        root.end()


class RecordedSentence(_RecordedUpstream):
    """One sentence of a session: a request under the session's span."""

    def ended(self, summary: SentenceEnd) -> None:
        failed = summary.status >= 500  # like a request's: refusals and cancels are not the server's errors
        self._end_admission(summary.error or summary.outcome, failed, summary.error)
        attributes: dict[str, AttributeValue] = {
            "higgs.sentence.outcome": summary.outcome,
            "higgs.retries": summary.retries,
            "higgs.audio_s": round(summary.received_bytes / BYTES_PER_SECOND, 3),
        }
        decision = summary.decision
        if decision is not None:
            attributes["higgs.route.reason"] = decision.reason
            if decision.pool is not None:
                attributes["higgs.pool"] = decision.pool.value
            if decision.worker_id is not None:
                attributes["higgs.worker"] = decision.worker_id
        if summary.error is not None:
            attributes["error.type"] = summary.error
        root = self._root
        root.set_attributes(attributes)
        if failed:
            root.set_status(Status(StatusCode.ERROR, summary.detail))
        root.end()


class _RecordedSession:
    """The session's SERVER span; each sentence a request under it."""

    def __init__(self, tracer: Tracer, clock: Clock, root: Span, request_id: str) -> None:
        self._tracer = tracer
        self._clock = clock
        self._root = root
        self._context = set_span_in_context(root)
        self._request_id = request_id
        self.trace_id: str | None = format_trace_id(root.get_span_context().trace_id)

    def sentence(self, utterance: int, index: int, request: RequestInfo) -> Started[RecordedSentence]:
        request_id = sentence_request_id(self._request_id, utterance, index)
        attributes: dict[str, AttributeValue] = {
            "higgs.request_id": request_id,
            "higgs.utterance": utterance,
            "higgs.sentence": index,
            "higgs.sla_class": str(request.sla_class),
            "higgs.input_chars": request.input_chars,
        }
        if request.deadline_s is not None:
            attributes["higgs.deadline_ms"] = round(request.deadline_s * 1000, 1)
        span = self._tracer.start_span(SENTENCE_SPAN, context=self._context, attributes=attributes)
        upstream = {REQUEST_ID_HEADER: request_id}
        if span.is_recording():
            return Started(upstream, self.trace_id, RecordedSentence(self._tracer, self._clock, span, request_id))
        _PROPAGATOR.inject(upstream, context=set_span_in_context(span))  # a sampler that is not parent-based
        return Started(upstream, self.trace_id)

    def finish(self, summary: SessionSummary) -> None:
        attributes: dict[str, AttributeValue] = {
            "http.response.status_code": summary.status,
            "higgs.session.end": summary.end,
            "higgs.session.utterances": summary.utterances,
            "higgs.session.sentences": summary.sentences,
        }
        for key, value in (("higgs.model", summary.model), ("higgs.response_format", summary.response_format), ("error.type", summary.error)):
            if value is not None:
                attributes[key] = value
        root = self._root
        root.set_attributes(attributes)
        if summary.status >= 500 or summary.end == "error":
            root.set_status(Status(StatusCode.ERROR, summary.error or summary.end))
        root.end()


def _record_attributes(status: int, record: RequestRecord) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "http.response.status_code": status,
        "higgs.sla_class": str(record.sla_class),
        "higgs.retries": record.retries,
        "higgs.audio_s": round(record.pcm_bytes / BYTES_PER_SECOND, 3),
    }
    optional: dict[str, object] = {
        "higgs.pool": record.pool,
        "higgs.worker": record.worker,
        "higgs.route.reason": record.reason,
        "higgs.model": record.model,
        "higgs.response_format": record.response_format,
        "higgs.stream_format": record.stream_format,
        "higgs.disconnect_phase": record.disconnect_phase,
        "error.type": record.error,
        "higgs.ttfp_ms": None if record.ttfp_s is None else round(record.ttfp_s * 1000, 1),
    }
    attributes.update({key: value for key, value in optional.items() if value is not None})  # type: ignore[misc]
    return attributes


class _Span(Protocol):
    def end(self, end_time: int | None = None) -> None: ...
    def set_attribute(self, key: str, value: AttributeValue) -> None: ...
    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None: ...
    def set_status(self, status: Status) -> None: ...


class _WallTime:
    """The relay's clock readings as span times (ns since the epoch): the offset between
    the two clocks is read once; ``None`` is now."""

    __slots__ = ("_clock", "_offset_ns")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._offset_ns = time.time_ns() - int(clock() * 1e9)

    def __call__(self, at: float | None) -> int:
        return self._offset_ns + int((self._clock() if at is None else at) * 1e9)


class _AttemptSpans:
    """``worker request``, and its phases drawn from the attempt's events: connect, first
    byte (until the attempt is settled), stream (until it is closed)."""

    def __init__(self, tracer: Tracer, parent: Context, request_id: str, worker: UpstreamWorker, number: int) -> None:
        self._tracer = tracer
        url = worker.url + SPEECH_PATH
        host, _, port = url.partition("://")[2].partition("/")[0].rpartition(":")
        attributes: dict[str, AttributeValue] = {
            "http.request.method": "POST",
            "url.full": url,
            "server.address": host or port,
            "higgs.worker": worker.worker_id,
            "higgs.pool": worker.pool.value,
            "higgs.attempt": number,
        }
        if host and port.isdigit():
            attributes["server.port"] = int(port)
        if number > 1:
            attributes["http.request.resend_count"] = number - 1
        self._span = tracer.start_span("worker request", context=parent, kind=SpanKind.CLIENT, attributes=attributes)
        self._context = set_span_in_context(self._span)
        headers = {REQUEST_ID_HEADER: request_id}
        _PROPAGATOR.inject(headers, context=self._context)
        self.headers: Mapping[str, str] = headers
        self._first_byte_at: float | None = None

    def _phase(self, name: str, start_ns: int, end_ns: int, failed: str | None = None) -> None:
        phase = self._tracer.start_span(name, context=self._context, start_time=start_ns)
        if failed is not None:
            phase.set_status(Status(StatusCode.ERROR, failed))
        phase.end(end_time=end_ns)

    def _failed(self, kind: str, detail: str) -> None:
        self._span.set_attribute("error.type", kind)
        self._span.set_status(Status(StatusCode.ERROR, detail))

    def settled(self, event: AttemptEnded, wall: _WallTime) -> None:
        failure = event.failure
        kind = None if failure is None else failure.kind.value
        if failure is not None:
            self._failed(failure.kind.value, failure.detail)
        if event.connected_at is None:
            self._phase("connect", wall(event.started_at), wall(None), kind)
            return
        self._span.set_attribute("http.response.status_code", event.status or 0)
        self._phase("connect", wall(event.started_at), wall(event.connected_at))
        if event.status == 200:
            self._phase("first byte", wall(event.connected_at), wall(event.first_byte_at), kind)
            self._first_byte_at = event.first_byte_at

    def closed(self, event: StreamEnded, wall: _WallTime) -> None:
        cut = None if event.cut is None else event.cut.value
        if cut is not None:
            self._failed(cut, event.cut_detail or cut)
        if self._first_byte_at is not None:
            self._phase("stream", wall(self._first_byte_at), wall(event.ended_at), cut)
        observation = event.observation
        # str(): a plain str for exporters, not the StrEnum.
        self._span.set_attributes({"higgs.stream.outcome": str(observation.outcome), "higgs.stream.bytes": observation.bytes})
        self._span.end(end_time=wall(event.ended_at))


class _TimedEncoder:
    """The request's encoder, timed: one ``encode`` span from the first chunk to the end,
    the time spent inside the encoder (it runs between reads of the worker's stream) as
    ``higgs.encode.busy_ms``. Two clock reads per chunk, only while tracing."""

    __slots__ = ("_encoder", "_tracer", "_parent", "_format", "_span", "_busy", "_chunks")

    def __init__(self, encoder: StreamEncoder, tracer: Tracer, parent: Context, audio_format: str) -> None:
        self._encoder = encoder
        self._tracer = tracer
        self._parent = parent
        self._format = str(audio_format)
        self._span: _Span | None = None
        self._busy = 0.0
        self._chunks = 0

    def encode(self, pcm: bytes) -> bytes:
        if self._span is None and self._chunks == 0:
            self._span = self._tracer.start_span("encode", context=self._parent, attributes={"higgs.response_format": self._format})
        started = time.perf_counter()
        try:
            return self._encoder.encode(pcm)
        finally:
            self._busy += time.perf_counter() - started
            self._chunks += 1

    def finish(self) -> bytes:
        started = time.perf_counter()
        try:
            return self._encoder.finish()
        finally:
            self._busy += time.perf_counter() - started
            self._end("finished")

    def close(self) -> None:
        self._encoder.close()
        self._end("closed")

    def _end(self, how: str) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        span.set_attributes(
            {"higgs.encode.busy_ms": round(self._busy * 1000, 3), "higgs.encode.chunks": self._chunks, "higgs.encode.ended": how}
        )
        span.end()
