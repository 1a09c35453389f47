"""OpenTelemetry spans for one speech request, and the headers that carry it to a worker.

The speech pipeline starts one ``RequestTrace`` per request, tells it each step as it
happens and finishes it once; the relay asks it for one ``AttemptTrace`` per worker
attempt. Recorded, a request is::

    POST /v1/audio/speech      SERVER: joins the caller's trace (W3C traceparent)
      admission                the wait for a slot
      route                    the decision: reason, pool, worker, predictions
      worker request           CLIENT, one per attempt: the traceparent the worker gets
        connect                  request sent until the worker's response headers
        first byte               until its first audio
        stream                   until the stream ends, however it ends
      encode                   first chunk encoded to the tail flushed; busy time inside

A voice session (``SessionTrace``) is one trace; each sentence it sends is a request
of its own, under the session's span, without the ``encode`` step (the session encodes)::

    GET /v1/audio/speech/stream   SERVER: the whole session, joins the handshake's traceparent
      sentence                    one per sentence sent: utterance, index, deadline, outcome
        admission, route, worker request (connect, first byte, stream)   as above

With tracing off (``PassThroughTracing``), nothing here builds a span or touches the SDK:
the worker still gets the request id and, unchanged, the caller's ``traceparent``. A
request the sampler leaves out costs its root span only: its hooks are the no-op ones.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider, format_trace_id, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway import __version__
from gateway.types import REQUEST_ID_HEADER, SPEECH_PATH, SPEECH_STREAM_PATH, PoolName
from gateway.types.codec import BYTES_PER_SECOND
from gateway.types.view import RequestInfo

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_TRACEPARENT = TRACEPARENT.encode()
_TRACESTATE = TRACESTATE.encode()
# W3C Trace Context: version-traceid-spanid-flags, lower-case hex; ids never all zero.
_TRACEPARENT_SHAPE = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACESTATE_MAX = 512  # what the spec asks every vendor to pass on, at least
_PROPAGATOR = TraceContextTextMapPropagator()
SERVER_SPAN = f"POST {SPEECH_PATH}"
SESSION_SPAN = f"GET {SPEECH_STREAM_PATH}"  # the WebSocket handshake is a GET
SENTENCE_SPAN = "sentence"
INSTRUMENTATION = "higgs_gateway"


class DecisionLike(Protocol):
    """A routing decision as the trace reads it (``gateway.types.decision.Decision``)."""

    @property
    def reason(self) -> str: ...
    @property
    def pool(self) -> PoolName | None: ...
    @property
    def worker_id(self) -> str | None: ...
    @property
    def predicted_ttfp_s(self) -> float | None: ...
    @property
    def predicted_rtf(self) -> float | None: ...


class RequestSummary(Protocol):
    """How a request ended, as the recorder's ``RequestRecord`` holds it."""

    @property
    def sla_class(self) -> str: ...
    @property
    def pool(self) -> str | None: ...
    @property
    def worker(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def retries(self) -> int: ...
    @property
    def error(self) -> str | None: ...
    @property
    def disconnect_phase(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def response_format(self) -> str | None: ...
    @property
    def stream_format(self) -> str | None: ...
    @property
    def ttfp_s(self) -> float | None: ...
    @property
    def pcm_bytes(self) -> int: ...


class Encoder(Protocol):
    """``audio.encoder.StreamEncoder``: what ``RequestTrace.encoding`` wraps."""

    def encode(self, pcm: bytes) -> bytes: ...
    def finish(self) -> bytes: ...
    def close(self) -> None: ...


class AttemptTrace(Protocol):
    """One attempt on one worker."""

    # Sent with the attempt: x-request-id, and traceparent (tracestate) when there is a trace.
    headers: Mapping[str, str]

    def connected(self, status: int) -> None: ...
    def first_byte(self) -> None: ...
    def failed(self, kind: str, detail: str) -> None: ...
    def closed(self, outcome: str, received_bytes: int) -> None: ...


class UpstreamTrace(Protocol):
    """The steps of any upstream request's trace: its wait in admission, each routing (a
    retry's from the relay) and one ``AttemptTrace`` per worker attempt."""

    def admission_started(self) -> None: ...
    def routed(self, decision: DecisionLike, retry: bool = False) -> None: ...
    def attempt(self, worker_id: str, pool: PoolName, url: str, number: int) -> AttemptTrace: ...


class RequestTrace(UpstreamTrace, Protocol):
    # The trace the request belongs to (32 hex digits), for the access log; None: none.
    trace_id: str | None

    def encoding(self, encoder: Encoder, audio_format: str) -> Encoder: ...
    def finish(self, status: int, summary: RequestSummary) -> None: ...


class SentenceSummary(Protocol):
    """How a session's sentence request ended (``sessions.sentence.SentenceEnd``)."""

    @property
    def outcome(self) -> str: ...  # completed, cancelled, failed, cut
    @property
    def status(self) -> int: ...  # the status the request would have had over HTTP (499: cancelled)
    @property
    def error(self) -> str | None: ...
    @property
    def detail(self) -> str | None: ...
    @property
    def decision(self) -> DecisionLike | None: ...
    @property
    def retries(self) -> int: ...
    @property
    def received_bytes(self) -> int: ...


class SentenceTrace(UpstreamTrace, Protocol):
    def ended(self, summary: SentenceSummary) -> None: ...


class SessionSummary(Protocol):
    """How a voice session ended, as its endpoint tells it."""

    @property
    def status(self) -> int: ...  # 101 once accepted; the refusal's status otherwise
    @property
    def end(self) -> str: ...  # closed, client_gone, timeout, refused, error, denied
    @property
    def error(self) -> str | None: ...
    @property
    def utterances(self) -> int: ...
    @property
    def sentences(self) -> int: ...
    @property
    def model(self) -> str | None: ...
    @property
    def response_format(self) -> str | None: ...


class SessionTrace(Protocol):
    # As ``RequestTrace.trace_id``: the trace the session belongs to, for its last log line.
    trace_id: str | None

    def sentence(self, utterance: int, index: int, request: RequestInfo) -> SentenceTrace: ...
    def finish(self, summary: SessionSummary) -> None: ...


class SpeechTracing(Protocol):
    def start(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> RequestTrace: ...
    def session(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> SessionTrace: ...


def sentence_request_id(session_request_id: str, utterance: int, index: int) -> str:
    """The ``x-request-id`` a session's sentence is sent with: the session's id (the one its
    handshake answered with), then the utterance and sentence indices its messages carry."""
    return f"{session_request_id}-u{utterance}-s{index}"


# ---- tracing off: headers only -------------------------------------------------------
class _Untraced:
    """Request and attempt in one object: every hook does nothing, the headers are fixed."""

    __slots__ = ("headers", "trace_id")

    def __init__(self, headers: Mapping[str, str], trace_id: str | None) -> None:
        self.headers = headers
        self.trace_id = trace_id

    def admission_started(self) -> None:
        pass

    def routed(self, decision: DecisionLike, retry: bool = False) -> None:
        pass

    def attempt(self, worker_id: str, pool: PoolName, url: str, number: int) -> _Untraced:
        return self

    def encoding(self, encoder: Encoder, audio_format: str) -> Encoder:
        return encoder

    def finish(self, status: int, summary: RequestSummary) -> None:
        pass

    def connected(self, status: int) -> None:
        pass

    def first_byte(self) -> None:
        pass

    def failed(self, kind: str, detail: str) -> None:
        pass

    def closed(self, outcome: str, received_bytes: int) -> None:
        pass

    def ended(self, summary: SentenceSummary) -> None:
        pass


UNTRACED: RequestTrace = _Untraced({}, None)  # no request behind it (tests, tools)


class _UntracedSession:
    """A session without spans: each sentence gets its own request id and the same trace
    headers (the caller's, or the sampled-out session span's)."""

    __slots__ = ("_request_id", "_trace_headers", "trace_id")

    def __init__(self, request_id: str | None, trace_headers: Mapping[str, str], trace_id: str | None) -> None:
        self._request_id = request_id
        self._trace_headers = trace_headers
        self.trace_id = trace_id

    def sentence(self, utterance: int, index: int, request: RequestInfo) -> SentenceTrace:
        if self._request_id is None:
            return _Untraced(self._trace_headers, self.trace_id)
        return _Untraced({REQUEST_ID_HEADER: sentence_request_id(self._request_id, utterance, index), **self._trace_headers}, self.trace_id)

    def finish(self, summary: SessionSummary) -> None:
        pass


UNTRACED_SESSION: SessionTrace = _UntracedSession(None, {}, None)  # no session behind it (tests)


class PassThroughTracing:
    """Tracing off: no spans; the worker gets the request id and the caller's valid
    ``traceparent``/``tracestate`` as they came, so a worker (or a mesh in front of it)
    that traces still joins the caller's trace."""

    def start(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> RequestTrace:
        traceparent, tracestate = incoming_trace_headers(headers)
        upstream = {REQUEST_ID_HEADER: request_id}
        if traceparent is None:
            return _Untraced(upstream, None)
        upstream[TRACEPARENT] = traceparent
        if tracestate is not None:
            upstream[TRACESTATE] = tracestate
        return _Untraced(upstream, traceparent[3:35])

    def session(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> SessionTrace:
        traceparent, tracestate = incoming_trace_headers(headers)
        if traceparent is None:
            return _UntracedSession(request_id, {}, None)
        upstream = {TRACEPARENT: traceparent} if tracestate is None else {TRACEPARENT: traceparent, TRACESTATE: tracestate}
        return _UntracedSession(request_id, upstream, traceparent[3:35])


def incoming_trace_headers(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """The caller's (traceparent, tracestate) from ASGI headers; (None, None) unless the
    traceparent is well-formed, tracestate None when absent or unusable."""
    traceparent = tracestate = None
    for name, value in headers:  # ASGI header names are lower case
        if name == _TRACEPARENT:
            traceparent = value.decode("latin-1")
        elif name == _TRACESTATE:
            tracestate = value.decode("latin-1")
    if traceparent is None or not valid_traceparent(traceparent):
        return None, None
    if tracestate is not None and (len(tracestate) > _TRACESTATE_MAX or not tracestate.isprintable()):
        tracestate = None
    return traceparent, tracestate


def valid_traceparent(value: str) -> bool:
    match = _TRACEPARENT_SHAPE.fullmatch(value)
    if match is None:
        return False
    version, trace_id, span_id, _flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return False
    return trace_id != "0" * 32 and span_id != "0" * 16


# ---- tracing on: spans ---------------------------------------------------------------
class OtelTracing:
    """Spans through an OpenTelemetry tracer provider (the SDK's, built by ``otlp``, or a
    test's with an in-memory exporter)."""

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer = provider.get_tracer(INSTRUMENTATION, __version__)

    def start(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> RequestTrace:
        root, traceparent = self._server_span(headers, "POST", SERVER_SPAN, SPEECH_PATH, request_id)
        if root.is_recording():
            return _RecordedRequest(self._tracer, root, request_id)
        # Sampled out: with a parent-based sampler nothing below it would be recorded, so no
        # child span is made at all (most of the cost); the worker still gets the trace.
        upstream = {REQUEST_ID_HEADER: request_id}
        _PROPAGATOR.inject(upstream, context=set_span_in_context(root))
        return _Untraced(upstream, None if traceparent is None else traceparent[3:35])

    def session(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> SessionTrace:
        root, traceparent = self._server_span(headers, "GET", SESSION_SPAN, SPEECH_STREAM_PATH, request_id)
        if root.is_recording():
            return _RecordedSession(self._tracer, root, request_id)
        upstream: dict[str, str] = {}  # sampled out: every sentence names the session's span
        _PROPAGATOR.inject(upstream, context=set_span_in_context(root))
        return _UntracedSession(request_id, upstream, None if traceparent is None else traceparent[3:35])

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
    """A request's steps under its root span: admission, route, worker attempts. The root
    is a request's SERVER span, or a session sentence's span."""

    def __init__(self, tracer: Tracer, root: Span, request_id: str) -> None:
        self._tracer = tracer
        self._request_id = request_id
        self._root = root
        self._context = set_span_in_context(root)
        self._admission: _Span | None = None
        self.trace_id: str | None = format_trace_id(root.get_span_context().trace_id)

    def admission_started(self) -> None:
        self._admission = self._tracer.start_span("admission", context=self._context)

    def routed(self, decision: DecisionLike, retry: bool = False) -> None:
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

    def attempt(self, worker_id: str, pool: PoolName, url: str, number: int) -> AttemptTrace:
        return _RecordedAttempt(self._tracer, self._context, self._request_id, worker_id, pool, url, number)

    def _end_admission(self, outcome: str, failed: bool, detail: str | None) -> None:
        """Refused or abandoned while waiting: the admission span ends saying so."""
        if self._admission is None:
            return
        self._admission.set_attribute("higgs.admission.outcome", outcome)
        if failed:
            self._admission.set_status(Status(StatusCode.ERROR, detail))
        self._admission.end()
        self._admission = None


class _RecordedRequest(_RecordedUpstream):
    def encoding(self, encoder: Encoder, audio_format: str) -> Encoder:
        return _TimedEncoder(encoder, self._tracer, self._context, audio_format)

    def finish(self, status: int, summary: RequestSummary) -> None:
        root = self._root
        self._end_admission(summary.error or summary.disconnect_phase or str(status), status >= 500, summary.error)
        root.set_attributes(_summary_attributes(status, summary))
        if status >= 500:  # a 4xx is the client's doing: not an error of this server span
            root.set_status(Status(StatusCode.ERROR, summary.error))
        root.end()


class _RecordedSentence(_RecordedUpstream):
    """One sentence of a session: a request under the session's span."""

    def ended(self, summary: SentenceSummary) -> None:
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

    def __init__(self, tracer: Tracer, root: Span, request_id: str) -> None:
        self._tracer = tracer
        self._root = root
        self._context = set_span_in_context(root)
        self._request_id = request_id
        self.trace_id: str | None = format_trace_id(root.get_span_context().trace_id)

    def sentence(self, utterance: int, index: int, request: RequestInfo) -> SentenceTrace:
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
        if span.is_recording():
            return _RecordedSentence(self._tracer, span, request_id)
        upstream = {REQUEST_ID_HEADER: request_id}  # a sampler that is not parent-based
        _PROPAGATOR.inject(upstream, context=set_span_in_context(span))
        return _Untraced(upstream, self.trace_id)

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


def _summary_attributes(status: int, summary: RequestSummary) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        "http.response.status_code": status,
        "higgs.sla_class": str(summary.sla_class),
        "higgs.retries": summary.retries,
        "higgs.audio_s": round(summary.pcm_bytes / BYTES_PER_SECOND, 3),
    }
    optional: dict[str, object] = {
        "higgs.pool": summary.pool,
        "higgs.worker": summary.worker,
        "higgs.route.reason": summary.reason,
        "higgs.model": summary.model,
        "higgs.response_format": summary.response_format,
        "higgs.stream_format": summary.stream_format,
        "higgs.disconnect_phase": summary.disconnect_phase,
        "error.type": summary.error,
        "higgs.ttfp_ms": None if summary.ttfp_s is None else round(summary.ttfp_s * 1000, 1),
    }
    attributes.update({key: value for key, value in optional.items() if value is not None})  # type: ignore[misc]
    return attributes


class _Span(Protocol):
    def end(self) -> None: ...
    def set_attribute(self, key: str, value: AttributeValue) -> None: ...
    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None: ...
    def set_status(self, status: Status) -> None: ...


class _RecordedAttempt:
    """``worker request`` with one phase span open at a time: connect, first byte, stream."""

    def __init__(
        self, tracer: Tracer, parent: Context, request_id: str, worker_id: str, pool: PoolName, url: str, number: int
    ) -> None:
        self._tracer = tracer
        host, _, port = url.partition("://")[2].partition("/")[0].rpartition(":")
        attributes: dict[str, AttributeValue] = {
            "http.request.method": "POST",
            "url.full": url,
            "server.address": host or port,
            "higgs.worker": worker_id,
            "higgs.pool": pool.value,
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
        self._phase: _Span | None = tracer.start_span("connect", context=self._context)

    def _next_phase(self, name: str | None) -> None:
        if self._phase is not None:
            self._phase.end()
        self._phase = None if name is None else self._tracer.start_span(name, context=self._context)

    def connected(self, status: int) -> None:
        self._span.set_attribute("http.response.status_code", status)
        self._next_phase("first byte" if status == 200 else None)

    def first_byte(self) -> None:
        self._next_phase("stream")

    def failed(self, kind: str, detail: str) -> None:
        self._span.set_attribute("error.type", kind)
        self._span.set_status(Status(StatusCode.ERROR, detail))
        if self._phase is not None:
            self._phase.set_status(Status(StatusCode.ERROR, kind))

    def closed(self, outcome: str, received_bytes: int) -> None:
        self._next_phase(None)
        # str(): a plain str for exporters, not the caller's StrEnum.
        self._span.set_attributes({"higgs.stream.outcome": str(outcome), "higgs.stream.bytes": received_bytes})
        self._span.end()


class _TimedEncoder:
    """The request's encoder, timed: one ``encode`` span from the first chunk to the end,
    the time spent inside the encoder (it runs between reads of the worker's stream) as
    ``higgs.encode.busy_ms``. Two clock reads per chunk, only while tracing."""

    __slots__ = ("_encoder", "_tracer", "_parent", "_format", "_span", "_busy", "_chunks")

    def __init__(self, encoder: Encoder, tracer: Tracer, parent: Context, audio_format: str) -> None:
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
