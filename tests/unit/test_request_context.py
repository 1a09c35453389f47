"""The request id on every log line a request causes, the trace headers read from a caller,
and the ``tracing:`` section of the config."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway.access_log import ACCESS_LOGGER, configure_logging
from gateway.api.entry import Entry
from gateway.config import ConfigError, UpstreamConfig, load_config
from gateway.log_text import TextFormatter
from gateway.telemetry.request_context import REQUEST_ID, send_request_id
from gateway.telemetry.propagation import incoming_trace_headers, valid_traceparent
from gateway.upstream.transport import HttpxTransport

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
log = logging.getLogger("gateway.test_request_context")


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("INFO", stream=stream)
    yield stream
    configure_logging("WARNING")


def records(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_lines_logged_while_serving_a_request_carry_its_id(lines: io.StringIO) -> None:
    async def handler(request: Request) -> PlainTextResponse:
        log.info("direct")
        await asyncio.create_task(_log_later("from a task the request started"))
        return PlainTextResponse("ok")

    app = Entry([], Starlette(routes=[Route("/x", handler)]))  # the id is set before any route
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        given = await client.get("/x", headers={"x-request-id": "req-given-1"})
        made = await client.get("/x")
    log.info("between requests")
    got = [(r["msg"], r.get("request_id")) for r in records(lines)]
    assert got == [
        ("direct", "req-given-1"),
        ("from a task the request started", "req-given-1"),
        ("direct", made.headers["x-request-id"]),
        ("from a task the request started", made.headers["x-request-id"]),
        ("between requests", None),  # reset once the request is over
    ]
    assert given.headers["x-request-id"] == "req-given-1"


async def _log_later(message: str) -> None:
    await asyncio.sleep(0)
    log.info(message)


def test_the_access_line_keeps_its_own_id_and_text_lines_show_the_id(lines: io.StringIO) -> None:
    token = REQUEST_ID.set("outer")
    try:
        logging.getLogger(ACCESS_LOGGER).info("POST", extra={"request_id": "the-request"})
    finally:
        REQUEST_ID.reset(token)
    [access] = records(lines)
    assert access["request_id"] == "the-request"
    record = logging.makeLogRecord({"name": "gateway.pools.fleet", "msg": "worker ll-0 ejected", "levelno": 20, "levelname": "INFO", "request_id": "7f3a9c0e11d2aa"})
    assert TextFormatter().format(record).endswith("worker ll-0 ejected  [req 7f3a9c0e11d2]")


async def test_control_calls_a_request_causes_carry_its_id() -> None:
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("x-request-id"))
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer), event_hooks={"request": [send_request_id]}) as client:
        await client.post("http://w.test/v1/audio/voices")  # a background call: no request
        token = REQUEST_ID.set("req-9")
        try:
            await client.post("http://w.test/v1/audio/voices")
        finally:
            REQUEST_ID.reset(token)
    assert seen == [None, "req-9"]


async def test_the_httpx_transport_sends_the_attempts_headers() -> None:
    seen: list[httpx.Headers] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, content=b"\x01\x00")

    transport = HttpxTransport(UpstreamConfig(transport="httpx"), transport=httpx.MockTransport(answer))
    response = await transport.post_stream("http://w.test/v1/audio/speech", {"input": "x"}, {"x-request-id": "r1", "traceparent": CALLER})
    await response.close()
    await transport.close()
    [headers] = seen
    assert (headers["x-request-id"], headers["traceparent"], headers["content-type"]) == ("r1", CALLER, "application/json")


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (CALLER, True),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later", True),  # a future version may add fields
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", False),  # version 00 may not
        ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        ("00-00000000000000000000000000000000-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", False),
        ("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", False),
        ("", False),
    ],
)
def test_traceparent_shapes(value: str, valid: bool) -> None:
    assert valid_traceparent(value) is valid


def test_tracestate_only_with_a_valid_traceparent_and_within_bounds() -> None:
    assert incoming_trace_headers([(b"traceparent", CALLER.encode()), (b"tracestate", b"a=1,b=2")]) == (CALLER, "a=1,b=2")
    assert incoming_trace_headers([(b"tracestate", b"a=1")]) == (None, None)
    assert incoming_trace_headers([(b"traceparent", b"junk"), (b"tracestate", b"a=1")]) == (None, None)
    assert incoming_trace_headers([(b"traceparent", CALLER.encode()), (b"tracestate", b"a=" + b"x" * 600)]) == (CALLER, None)


# ---- tracing: in the config ------------------------------------------------------------
def test_tracing_is_off_by_default_and_on_with_an_endpoint() -> None:
    assert load_config().tracing.enabled is False
    tracing = load_config(overrides={"tracing": {"endpoint": " http://jaeger:4318 ", "sample_ratio": 0.1}}).tracing
    assert tracing.enabled and tracing.endpoint == "http://jaeger:4318" and tracing.protocol == "http/protobuf"
    assert tracing.service_name == "higgs-gateway" and tracing.sample_ratio == 0.1


def test_tracing_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIGGS_GATEWAY_TRACING__ENDPOINT", "http://tempo:4317")
    monkeypatch.setenv("HIGGS_GATEWAY_TRACING__PROTOCOL", "grpc")
    monkeypatch.setenv("HIGGS_GATEWAY_TRACING__HEADERS", '{"x-api-key": "s3cret"}')
    tracing = load_config(overrides={"tracing": {"endpoint": "http://other:4318"}}).tracing
    assert (tracing.endpoint, tracing.protocol) == ("http://tempo:4317", "grpc")  # the environment wins
    assert tracing.headers["x-api-key"].get_secret_value() == "s3cret" and "s3cret" not in repr(tracing)


@pytest.mark.parametrize(
    ("tracing", "key"),
    [
        ({"endpoint": "jaeger:4318"}, "tracing.endpoint"),
        ({"endpoint": "ftp://jaeger"}, "tracing.endpoint"),
        ({"endpoint": "http://"}, "tracing.endpoint"),
        ({"sample_ratio": 1.5}, "tracing.sample_ratio"),
        ({"protocol": "thrift"}, "tracing.protocol"),
        ({"service_name": ""}, "tracing.service_name"),
        ({"enabled": True}, "tracing.enabled"),  # unknown keys are refused, as everywhere
    ],
)
def test_bad_tracing_settings_name_their_key(tracing: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(overrides={"tracing": tracing})


def test_serve_check_finds_a_tracing_gateway_without_its_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.config_check import config_findings

    config = load_config(overrides={"tracing": {"endpoint": "http://jaeger:4318"}})
    assert [f for f in config_findings(config) if f.key == "tracing.endpoint"] == []
    # As installed without the extra: the SDK cannot be imported.
    monkeypatch.delitem(sys.modules, "gateway.telemetry.otlp", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    [finding] = [f for f in config_findings(config) if f.key == "tracing.endpoint"]
    assert "higgs-gateway[tracing]" in finding.reason
