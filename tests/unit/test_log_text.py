"""Short human log lines on a terminal; JSON everywhere else unless asked."""

from __future__ import annotations

import io
import logging

from gateway.access_log import ACCESS_LOGGER, AccessLog, AccessRecord
from gateway.log_text import TextFormatter, wants_text


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def formatted(logger: str, message: str, **extra: object) -> str:
    record = logging.makeLogRecord({"name": logger, "msg": message, "levelno": logging.INFO, "levelname": "INFO", **extra})
    return TextFormatter().format(record)


def test_a_request_is_one_short_line_with_pool_reason_and_ttfp() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("test_log_text.access")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.name = ACCESS_LOGGER  # formatted as the access log
    record = AccessRecord("abcdef0123456789", "latency", 200, 812.0, pool="low_latency", reason="idle_capacity",
                          ttfp_ms=182.4, audio_s=4.12)  # fmt: skip
    AccessLog(logger=logger).log(record)
    line = stream.getvalue().strip()
    assert line.endswith("request     200 latency -> low_latency (idle_capacity)  TTFP 182 ms  4.1 s audio  [req abcdef012345]")
    assert "{" not in line


def test_other_lines_carry_a_topic_and_the_message() -> None:
    line = formatted("gateway.supervisor.worker", "worker ll-0 answers")
    assert line.endswith("  supervisor  worker ll-0 answers")
    assert formatted("higgs_gateway", "warm-up ok").endswith("  gateway     warm-up ok")
    assert formatted("uvicorn.error", "Started").endswith("  server      Started")
    warning = formatted("gateway.pools.fleet", "worker x not ready", levelno=logging.WARNING, levelname="WARNING")
    assert "warning: worker x not ready" in warning


def test_auto_means_text_only_on_a_terminal() -> None:
    assert wants_text("auto", Tty()) is True
    assert wants_text("auto", io.StringIO()) is False
    assert wants_text("text", io.StringIO()) is True
    assert wants_text("json", Tty()) is False
