"""Short human log lines for a terminal (``logging.format: text``), e.g. while running the demo.

    15:03:12  supervisor  worker ll-0 answers
    15:03:14  request     200 latency -> low_latency (idle_capacity)  TTFP 182 ms  4.1 s audio  [req 7f3a...]

JSON stays the format for log shippers; this one drops every field a person does not read.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime
from typing import IO

# The access log's logger: its records are formatted as one request line.
ACCESS_LOGGER = "higgs_gateway.access"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        if record.name == ACCESS_LOGGER:
            return f"{stamp}  {'request':<10}  {_access_line(record)}"
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        line = f"{stamp}  {_topic(record):<10}  {level}{record.getMessage()}"
        request_id = record.__dict__.get("request_id")
        if request_id:  # a line a request caused (request_context.RequestIdFilter)
            line += f"  [req {str(request_id)[:12]}]"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _topic(record: logging.LogRecord) -> str:
    """A one-word topic from the logger name (``gateway.supervisor.worker`` -> ``supervisor``)."""
    if record.name.startswith("uvicorn"):
        return "server"
    parts = [part for part in record.name.split(".") if part not in ("gateway", "higgs_gateway")]
    if not parts:
        return "gateway"
    # A package's module (`supervisor.worker`) speaks for the package; a lone module for itself.
    return parts[0][:10]


def _access_line(record: logging.LogRecord) -> str:
    fields = record.__dict__
    parts = [str(fields.get("status", "")), f"{fields.get('sla_class', '?')} -> {fields.get('pool') or 'no pool'}"]
    if fields.get("reason"):
        parts[-1] += f" ({fields['reason']})"
    line = " ".join(parts)
    if fields.get("ttfp_ms") is not None:
        line += f"  TTFP {fields['ttfp_ms']:.0f} ms"
    if fields.get("audio_s"):
        line += f"  {fields['audio_s']:.1f} s audio"
    if fields.get("error"):
        line += f"  error {fields['error']}"
    if fields.get("request_id"):
        line += f"  [req {str(fields['request_id'])[:12]}]"
    return line


def wants_text(log_format: str, stream: IO[str] | None = None) -> bool:
    """Whether ``logging.format`` asks for text lines on ``stream`` (stderr by default)."""
    if log_format == "auto":
        target = stream if stream is not None else sys.stderr
        return bool(getattr(target, "isatty", lambda: False)())
    return log_format == "text"
