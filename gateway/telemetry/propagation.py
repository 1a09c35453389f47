"""The headers every worker attempt carries, and what is left of tracing when it is off.

Each attempt sends the request's ``x-request-id``; with a caller that sent a valid W3C
``traceparent`` (and ``tracestate``), those too, unchanged, so a worker (or a mesh in
front of it) that traces still joins the caller's trace. That is all the gateway does
per request with tracing off (``PassThroughTracing``): no span is built and nothing in
``telemetry.tracing`` runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.types import REQUEST_ID_HEADER
from gateway.types.view import RequestInfo

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_TRACEPARENT = TRACEPARENT.encode()
_TRACESTATE = TRACESTATE.encode()
# W3C Trace Context: version-traceid-spanid-flags, lower-case hex; ids never all zero.
_TRACEPARENT_SHAPE = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACESTATE_MAX = 512  # what the spec asks every vendor to pass on, at least

S = TypeVar("S", covariant=True)


@dataclass(frozen=True, slots=True)
class Started(Generic[S]):
    """A request (or a session's sentence) as its trace starts it: what each attempt sends
    without spans, the trace it belongs to (for the log), and its spans (None: none)."""

    headers: Mapping[str, str]
    trace_id: str | None
    spans: S | None = None


def sentence_request_id(session_request_id: str, utterance: int, index: int) -> str:
    """The ``x-request-id`` a session's sentence is sent with: the session's id (the one its
    handshake answered with), then the utterance and sentence indices its messages carry."""
    return f"{session_request_id}-u{utterance}-s{index}"


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


NOT_TRACED: Started[None] = Started({}, None)  # no request behind it (tests, tools)


class UntracedSession:
    """A session without spans: each sentence gets its own request id and the same trace
    headers (the caller's, or the sampled-out session span's)."""

    __slots__ = ("_request_id", "_trace_headers", "trace_id")

    def __init__(self, request_id: str | None, trace_headers: Mapping[str, str], trace_id: str | None) -> None:
        self._request_id = request_id
        self._trace_headers = trace_headers
        self.trace_id = trace_id

    def sentence(self, utterance: int, index: int, request: RequestInfo) -> Started[None]:
        if self._request_id is None:
            return Started(self._trace_headers, self.trace_id)
        request_id = sentence_request_id(self._request_id, utterance, index)
        return Started({REQUEST_ID_HEADER: request_id, **self._trace_headers}, self.trace_id)

    def finish(self, summary: object) -> None:
        pass


UNTRACED_SESSION = UntracedSession(None, {}, None)  # no session behind it (tests)


class PassThroughTracing:
    """Tracing off: no spans; the worker gets the request id and the caller's valid
    ``traceparent``/``tracestate`` as they came."""

    def start(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> Started[None]:
        traceparent, tracestate = incoming_trace_headers(headers)
        upstream = {REQUEST_ID_HEADER: request_id}
        if traceparent is None:
            return Started(upstream, None)
        upstream[TRACEPARENT] = traceparent
        if tracestate is not None:
            upstream[TRACESTATE] = tracestate
        return Started(upstream, traceparent[3:35])

    def session(self, headers: Iterable[tuple[bytes, bytes]], request_id: str) -> UntracedSession:
        traceparent, tracestate = incoming_trace_headers(headers)
        if traceparent is None:
            return UntracedSession(request_id, {}, None)
        upstream = {TRACEPARENT: traceparent} if tracestate is None else {TRACEPARENT: traceparent, TRACESTATE: tracestate}
        return UntracedSession(request_id, upstream, traceparent[3:35])
