"""Span helpers shared by the tracing tests."""

from __future__ import annotations

import threading

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor


class OpenSpans(SpanProcessor):
    """Spans started and not yet ended, by name: none may be left once a request is over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, str] = {}

    @property
    def open(self) -> list[str]:
        with self._lock:
            return sorted(self._open.values())

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with self._lock:
            self._open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        with self._lock:
            self._open.pop(span.context.span_id, None)


def children(spans: list[ReadableSpan] | tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[ReadableSpan]:
    """The spans whose parent is ``parent``, in the order they started."""
    found = [span for span in spans if span.parent is not None and span.parent.span_id == parent.context.span_id]
    return sorted(found, key=lambda span: span.start_time or 0)
