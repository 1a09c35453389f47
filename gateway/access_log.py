"""Structured logs: one JSON object per line, and one access-log line per request.

Everything goes through the stdlib ``logging`` module so uvicorn's, httpx's and our own
loggers share one handler and one format. Any ``extra={...}`` a caller passes (worker
state changes, threshold changes, ...) becomes top-level JSON fields, so log pipelines
can filter on them without parsing the message.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from gateway.log_text import ACCESS_LOGGER, TextFormatter
from gateway.telemetry.log_redaction import RedactSecrets
from gateway.telemetry.request_context import RequestIdFilter

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", **extra, "exc"?}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            payload["stack"] = self.formatStack(record.stack_info)
        # default=str: an odd extra (a Path, an enum, a datetime) must never lose the line.
        # orjson: this runs once per request on the hot path, several times faster than json.
        return orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler configure_logging installed, so calling it again replaces it."""


def configure_logging(level: str | int = "INFO", *, json_lines: bool = True, stream: IO[str] | None = None) -> None:
    """Send every logger's records to ``stream`` (stderr) as JSON lines (or plain text).

    Idempotent: a second call replaces the handler it installed before. Run uvicorn with
    ``log_config=None`` (its loggers then propagate here) and ``access_log=False`` (the
    gateway writes its own, richer access line).
    """
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(handler)
    handler = _OurHandler(stream if stream is not None else sys.stderr)
    # Every line a request causes carries its id (request_context.REQUEST_ID).
    handler.addFilter(RequestIdFilter())
    # No credential in any line, whoever logged it (a key in a WebSocket URL's query string).
    handler.addFilter(RedactSecrets())
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # Per-request chatter from the HTTP clients would drown the access log at INFO (httpx2:
    # the Kubernetes discovery client's, which would also log every retry of an outage).
    for noisy in ("httpx", "httpcore", "httpx2", "httpcore2"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


@dataclass(frozen=True, slots=True)
class AccessRecord:
    """What one request did; the fields become the access line's JSON fields."""

    request_id: str
    sla_class: str
    status: int
    duration_ms: float
    pool: str | None = None  # None: never reached a pool (rejected, invalid)
    worker: str | None = None
    reason: str | None = None  # the routing reason, or why it was rejected
    ttfp_ms: float | None = None  # None: no audio byte was sent
    audio_s: float = 0.0
    method: str = "POST"
    path: str = "/v1/audio/speech"
    model: str | None = None
    response_format: str | None = None
    stream_format: str | None = None
    input_chars: int | None = None
    retries: int = 0
    key_id: str | None = None  # which API key (a digest prefix, never the key)
    error: str | None = None  # short error type, never a worker's full message
    trace_id: str | None = None  # W3C trace id (32 hex): find the request's trace by it
    input_text: str | None = None  # only written when log_input_text is on


class AccessLog:
    """Writes one ``ACCESS_LOGGER`` line per request, at INFO (WARNING for 5xx)."""

    def __init__(self, *, enabled: bool = True, log_input_text: bool = False, logger: logging.Logger | None = None) -> None:
        self.enabled = enabled
        self.log_input_text = log_input_text
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)

    def log(self, record: AccessRecord) -> None:
        if not self.enabled:
            return
        fields = asdict(record)
        if not self.log_input_text:
            # Request text is user content: kept out of logs unless the operator opts in.
            fields.pop("input_text")
        fields["ttfp_ms"] = _round(record.ttfp_ms)
        fields["duration_ms"] = _round(record.duration_ms)
        fields["audio_s"] = round(record.audio_s, 3)
        level = logging.WARNING if record.status >= 500 else logging.INFO
        self.logger.log(level, "%s %s %d", record.method, record.path, record.status, extra=fields)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
