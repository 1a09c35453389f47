"""The JSON log format and the per-request access line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from gateway.access_log import ACCESS_LOGGER, AccessLog, AccessRecord, JsonFormatter, configure_logging


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    configure_logging("INFO", stream=stream)
    try:
        yield stream
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def lines(stream: io.StringIO) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def record(**overrides: object) -> AccessRecord:
    fields: dict[str, object] = dict(
        request_id="req-1", sla_class="latency", status=200, duration_ms=812.345, pool="low_latency",
        worker="low_latency-0", reason="ll_slot_free", ttfp_ms=143.21, audio_s=2.51234, input_chars=42,
        input_text="Hello there, secret words.",
    )  # fmt: skip
    fields.update(overrides)
    return AccessRecord(**fields)  # type: ignore[arg-type]


def test_one_json_line_per_request_without_the_text(captured: io.StringIO) -> None:
    AccessLog().log(record())
    [line] = lines(captured)
    assert line["logger"] == ACCESS_LOGGER
    assert line["level"] == "INFO"
    assert line["msg"] == "POST /v1/audio/speech 200"
    for key, expected in {
        "request_id": "req-1", "sla_class": "latency", "pool": "low_latency", "worker": "low_latency-0",
        "reason": "ll_slot_free", "status": 200, "ttfp_ms": 143.2, "duration_ms": 812.3, "audio_s": 2.512,
    }.items():  # fmt: skip
        assert line[key] == expected, key
    assert "input_text" not in line
    assert "Hello there" not in captured.getvalue()


def test_text_only_when_the_operator_opts_in(captured: io.StringIO) -> None:
    AccessLog(log_input_text=True).log(record())
    assert lines(captured)[0]["input_text"] == "Hello there, secret words."


def test_rejections_and_failures(captured: io.StringIO) -> None:
    log = AccessLog()
    log.log(record(status=429, pool=None, worker=None, reason="queue_full", ttfp_ms=None, audio_s=0.0))
    log.log(record(status=502, error="upstream_error"))
    rejected, failed = lines(captured)
    assert rejected["pool"] is None and rejected["ttfp_ms"] is None and rejected["level"] == "INFO"
    assert failed["level"] == "WARNING" and failed["error"] == "upstream_error"


def test_disabled_access_log_writes_nothing(captured: io.StringIO) -> None:
    AccessLog(enabled=False).log(record())
    assert captured.getvalue() == ""


def test_other_loggers_extra_fields_and_exceptions_are_rendered(captured: io.StringIO) -> None:
    log = logging.getLogger("higgs_gateway.fleet")
    log.info("worker state changed", extra={"worker": "high_throughput-0", "old": "ready", "new": "ejected", "at": object()})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("probe crashed")
    changed, crashed = lines(captured)
    assert changed["msg"] == "worker state changed"
    assert changed["worker"] == "high_throughput-0" and changed["new"] == "ejected"
    assert changed["at"].startswith("<object")  # unserialisable extras become strings, never lost lines
    assert crashed["level"] == "ERROR" and "ValueError: boom" in crashed["exc"]


def test_configure_logging_is_idempotent_and_sets_the_level(captured: io.StringIO) -> None:
    configure_logging("warning", stream=captured)
    configure_logging("warning", stream=captured)
    root = logging.getLogger()
    assert sum(isinstance(h.formatter, JsonFormatter) for h in root.handlers) == 1
    assert root.level == logging.WARNING
    logging.getLogger("x").info("hidden")
    logging.getLogger("x").warning("shown")
    assert [line["msg"] for line in lines(captured)] == ["shown"]


@pytest.mark.parametrize("client_logger", ["httpx", "httpcore", "httpx2", "httpcore2"])
def test_http_clients_request_lines_are_quiet_at_info(captured: io.StringIO, client_logger: str) -> None:
    # httpx2 is the Kubernetes discovery client's: one INFO line per retry would undo
    # logging an API-server outage once.
    logging.getLogger(client_logger).info('HTTP Request: GET http://api/ "HTTP/1.1 503 Service Unavailable"')
    logging.getLogger(client_logger).warning("kept")
    assert [line["msg"] for line in lines(captured)] == ["kept"]
