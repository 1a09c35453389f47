"""Tracing through the stack ``serve`` runs, over a fake worker transport: the spans a speech
request makes (SDK in-memory exporter), the headers each worker attempt carries, and
what is left when tracing is off."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

from gateway.access_log import configure_logging
from gateway.app import GatewayApp, create_app
from gateway.config import load_config
from gateway.types import PoolName
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.upstream.errors import UpstreamError
from tests.support.deadline import until
from tests.unit.test_app import worker_control
from tests.unit.upstream.fakes import FakeResponse, FakeTransport

LL_URL, HT_URL = "http://ll.test:1", "http://ht.test:1"
PCM = b"\x01\x00" * 2400
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
BODY = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}


def config(tmp_path: Path, **extra: Any) -> Any:
    return load_config(
        overrides={
            "data_dir": str(tmp_path),
            "health": {"interval_s": 0.05, "eject_after_failures": 1},
            "pools": {
                "low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": [LL_URL]},
                "high_throughput": {"profile": "higgs_multimodal_qwen3_high_throughput.yaml", "workers": [HT_URL]},
            },
            **extra,
        }
    )


@asynccontextmanager
async def gateway(app: GatewayApp) -> AsyncIterator[httpx.AsyncClient]:
    await app.start()
    try:
        # The health checker's first probes make both workers routable.
        await until(lambda: all(app.fleet.view.routable_count(pool) for pool in PoolName), 10, "both workers routable")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test") as client:
            yield client
    finally:
        await app.stop()


def build(tmp_path: Path, transport: FakeTransport, provider: TracerProvider | None = None, **extra: Any) -> GatewayApp:
    control = httpx.AsyncClient(transport=httpx.MockTransport(worker_control))
    return create_app(config(tmp_path, **extra), transport=transport, control_client=control, tracer_provider=provider)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def access_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("INFO", stream=stream)
    yield stream
    configure_logging("WARNING")


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def log_records(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_a_speech_request_is_one_trace_joined_to_the_callers(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter, access_lines: io.StringIO
) -> None:
    transport = FakeTransport({LL_URL: [FakeResponse(200, [PCM, PCM])], HT_URL: []})
    async with gateway(build(tmp_path, transport, provider)) as client:
        response = await client.post(
            "/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency", "traceparent": CALLER, "tracestate": "vendor=1"}
        )
    assert response.status_code == 200 and response.content == PCM + PCM
    spans = by_name(exporter.get_finished_spans())
    [root] = spans["POST /v1/audio/speech"]
    # The caller's trace, the caller's span as parent.
    assert root.kind is SpanKind.SERVER
    assert format_trace_id(root.context.trace_id) == CALLER_TRACE and format_span_id(parent_of(root) or 0) == CALLER_SPAN
    assert root.attributes is not None
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["higgs.request_id"] == response.headers["x-request-id"]
    assert root.attributes["higgs.sla_class"] == "latency" and root.attributes["higgs.pool"] == "low_latency"
    assert root.attributes["higgs.audio_s"] == pytest.approx(2 * len(PCM) / 48_000)
    for name in ("admission", "route", "worker request", "encode"):
        [span] = spans[name]
        assert parent_of(span) == root.context.span_id, name
        assert span.context.trace_id == root.context.trace_id
    [route] = spans["route"]
    assert route.attributes is not None
    assert route.attributes["higgs.route.reason"] == response.headers["x-gateway-route-reason"]
    assert route.attributes["higgs.pool"] == "low_latency" and route.attributes["higgs.route.retry"] is False
    # The adaptive policy predicts; the trace carries what the response headers say.
    assert route.attributes["higgs.route.predicted_ttfp_ms"] == pytest.approx(float(response.headers["x-gateway-predicted-ttfp-ms"]), abs=0.5)
    assert route.attributes["higgs.route.predicted_rtf"] == pytest.approx(float(response.headers["x-gateway-predicted-rtf"]), abs=5e-4)
    [attempt] = spans["worker request"]
    assert attempt.kind is SpanKind.CLIENT and attempt.attributes is not None
    assert attempt.attributes["url.full"] == f"{LL_URL}/v1/audio/speech" and attempt.attributes["server.port"] == 1
    assert attempt.attributes["http.response.status_code"] == 200
    assert attempt.attributes["higgs.stream.outcome"] == "completed" and attempt.attributes["higgs.stream.bytes"] == 2 * len(PCM)
    # The attempt's phases, one after the other, inside it.
    phases = [spans[name][0] for name in ("connect", "first byte", "stream")]
    assert all(parent_of(phase) == attempt.context.span_id for phase in phases)
    assert [p.start_time for p in phases] == sorted(p.start_time for p in phases)
    assert all(a.end_time <= b.start_time for a, b in zip(phases, phases[1:], strict=False))  # type: ignore[operator]
    [encode] = spans["encode"]
    assert encode.attributes is not None and encode.attributes["higgs.encode.chunks"] == 2
    assert encode.attributes["higgs.response_format"] == "pcm" and encode.attributes["higgs.encode.ended"] == "finished"

    # The worker got the request id and a traceparent naming the attempt's span, in the caller's trace.
    [sent] = transport.headers
    assert sent["x-request-id"] == response.headers["x-request-id"]
    assert sent["traceparent"] == f"00-{CALLER_TRACE}-{format_span_id(attempt.context.span_id)}-01"
    assert sent["tracestate"] == "vendor=1"
    # The access line names the trace.
    [access] = [r for r in log_records(access_lines) if r["logger"] == "higgs_gateway.access"]
    assert access["trace_id"] == CALLER_TRACE and access["request_id"] == response.headers["x-request-id"]


async def test_a_retry_is_a_second_attempt_span_and_a_second_route(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter, access_lines: io.StringIO
) -> None:
    transport = FakeTransport({LL_URL: [FakeResponse(500, body=b'{"error": {"message": "boom"}}')], HT_URL: [FakeResponse(200, [PCM])]})
    async with gateway(build(tmp_path, transport, provider)) as client:
        response = await client.post("/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency"})
    assert response.status_code == 200
    spans = by_name(exporter.get_finished_spans())
    [root] = spans["POST /v1/audio/speech"]
    assert root.parent is None  # no caller trace: the gateway starts one
    failed, served = sorted(spans["worker request"], key=lambda s: s.start_time or 0)
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes is not None
    assert failed.attributes["error.type"] == UpstreamErrorKind.STATUS_5XX.value
    assert failed.attributes["higgs.stream.outcome"] == "retried" and failed.attributes["http.response.status_code"] == 500
    assert served.attributes is not None and served.attributes["http.request.resend_count"] == 1
    assert served.attributes["higgs.pool"] == "high_throughput"
    assert [route.attributes and route.attributes["higgs.route.retry"] for route in spans["route"]] == [False, True]
    # Each attempt told its worker its own span; both carry the request id.
    assert [h["x-request-id"] for h in transport.headers] == [response.headers["x-request-id"]] * 2
    assert [h["traceparent"].split("-")[2] for h in transport.headers] == [
        format_span_id(failed.context.span_id), format_span_id(served.context.span_id)
    ]
    assert root.attributes is not None and root.attributes["higgs.retries"] == 1
    assert root.status.status_code is StatusCode.UNSET
    # The ejection the failure caused was logged with the request's id.
    request_id = response.headers["x-request-id"]
    ejected = [r for r in log_records(access_lines) if r["logger"] != "higgs_gateway.access" and r.get("to") == "ejected"]
    assert ejected and all(r["request_id"] == request_id for r in ejected)


async def test_a_failed_request_ends_its_trace_as_an_error(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    refused = UpstreamError(UpstreamErrorKind.CONNECT, "connection refused")
    transport = FakeTransport({LL_URL: [refused], HT_URL: [refused]})
    async with gateway(build(tmp_path, transport, provider)) as client:
        response = await client.post("/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency"})
    assert response.status_code == 502
    spans = by_name(exporter.get_finished_spans())
    [root] = spans["POST /v1/audio/speech"]
    assert root.status.status_code is StatusCode.ERROR and root.attributes is not None
    assert root.attributes["http.response.status_code"] == 502 and root.attributes["error.type"] == "upstream_error"
    attempts = spans["worker request"]
    assert len(attempts) == 2 and all(a.status.status_code is StatusCode.ERROR for a in attempts)
    # Refused before any response: the connect phase failed and nothing came after it.
    assert all(c.status.status_code is StatusCode.ERROR for c in spans["connect"])
    assert "first byte" not in spans and "stream" not in spans and "encode" not in spans


async def test_a_refusal_in_admission_is_recorded_on_the_admission_span(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    transport = FakeTransport({LL_URL: [], HT_URL: []})
    one_slot = {"thresholds": {"max_per_worker": {"low_latency": 1, "high_throughput": 1}}}
    app = build(tmp_path, transport, provider, routing=one_slot, admission={"max_wait_s": {"throughput": 0.05}})
    async with gateway(app) as client:
        leases = [app.fleet.leases.lease(worker.worker_id) for worker in app.fleet.view.workers]  # every slot taken
        response = await client.post("/v1/audio/speech", json=BODY, headers={"x-sla-class": "throughput"})
        for lease in leases:
            lease.release()
    assert response.status_code in (429, 503), response.text
    spans = by_name(exporter.get_finished_spans())
    [admission] = spans["admission"]
    assert admission.attributes is not None and admission.attributes["higgs.admission.outcome"] == response.json()["error"]["code"]
    assert (admission.end_time or 0) - (admission.start_time or 0) >= 0.04e9  # it waited in the queue
    assert "route" not in spans and "worker request" not in spans and transport.calls == []


async def test_sampled_out_requests_record_nothing_but_still_propagate(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    transport = FakeTransport({LL_URL: [FakeResponse(200, [PCM]), FakeResponse(200, [PCM])], HT_URL: []})
    async with gateway(build(tmp_path, transport, provider)) as client:
        response = await client.post("/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency"})
        unsampled_caller = await client.post(
            "/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency", "traceparent": CALLER[:-2] + "00"}
        )
    provider.shutdown()
    assert response.status_code == unsampled_caller.status_code == 200
    assert exporter.get_finished_spans() == ()
    sent, passed = transport.headers
    assert sent["x-request-id"] == response.headers["x-request-id"]
    flags = int(sent["traceparent"].rsplit("-", 1)[1], 16)
    assert flags & 1 == 0  # a trace id, marked not sampled
    # The caller's decision holds: its trace goes on, unrecorded, with the gateway's span id.
    assert passed["traceparent"].startswith(f"00-{CALLER_TRACE}-") and passed["traceparent"].endswith("-00")


async def test_tracing_off_passes_the_callers_trace_headers_through(tmp_path: Path, access_lines: io.StringIO) -> None:
    transport = FakeTransport({LL_URL: [FakeResponse(200, [PCM]), FakeResponse(200, [PCM]), FakeResponse(200, [PCM])], HT_URL: []})
    async with gateway(build(tmp_path, transport)) as client:
        traced = await client.post(
            "/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency", "traceparent": CALLER, "tracestate": "a=1"}
        )
        forged = await client.post(
            "/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency", "traceparent": "00-xyz-1-01", "tracestate": "a=1"}
        )
        plain = await client.post("/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency", "x-request-id": "caller-id-7"})
    assert [r.status_code for r in (traced, forged, plain)] == [200, 200, 200]
    assert transport.headers == [
        {"x-request-id": traced.headers["x-request-id"], "traceparent": CALLER, "tracestate": "a=1"},
        {"x-request-id": forged.headers["x-request-id"]},  # a malformed traceparent goes no further
        {"x-request-id": "caller-id-7"},
    ]
    access = [r for r in log_records(access_lines) if r["logger"] == "higgs_gateway.access"]
    assert [r["trace_id"] for r in access] == [CALLER_TRACE, None, None]


@contextmanager
def calls_into(module: Any) -> Iterator[list[str]]:
    """Every Python function of ``module`` entered meanwhile, by name (the profiler hook)."""
    path, entered = module.__file__, []

    def profile(frame: Any, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code.co_filename == path:
            entered.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        yield entered
    finally:
        sys.setprofile(None)


async def test_tracing_off_runs_no_tracing_code_per_request(tmp_path: Path) -> None:
    from gateway.telemetry import tracing

    # A retry too: a failed attempt, then a served one.
    transport = FakeTransport({LL_URL: [FakeResponse(500, body=b"boom")], HT_URL: [FakeResponse(200, [PCM])]})
    async with gateway(build(tmp_path, transport)) as client:
        with calls_into(tracing) as entered:
            response = await client.post("/v1/audio/speech", json=BODY, headers={"x-sla-class": "latency", "traceparent": CALLER})
    assert response.status_code == 200 and len(transport.calls) == 2
    assert entered == []
    with calls_into(tracing) as entered:  # the counter counts: a traced request enters it
        tracing.OtelTracing(TracerProvider()).start([], "req-1")
    assert entered


def test_tracing_off_never_loads_the_sdk(tmp_path: Path) -> None:
    # A fresh interpreter: this test process has the SDK loaded by the tests above.
    script = f"""
import sys
from gateway.app import create_app
from gateway.config import load_config
create_app(load_config(overrides={{"data_dir": {str(tmp_path)!r}}}))
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk") or m.startswith("opentelemetry.exporter"))
assert not loaded, loaded
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_a_configured_endpoint_builds_an_exporting_provider(tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    from gateway.telemetry.otlp import span_exporter, tracer_provider, traces_url

    cfg = config(tmp_path, tracing={"endpoint": "http://jaeger:4318", "service_name": "gw-a", "sample_ratio": 0.25})
    provider = tracer_provider(cfg.tracing)
    try:
        assert provider.resource.attributes["service.name"] == "gw-a"
        assert "TraceIdRatioBased{0.25}" in provider.sampler.get_description()
        exporter = span_exporter(cfg.tracing)
        assert isinstance(exporter, HttpExporter) and exporter._endpoint == "http://jaeger:4318/v1/traces"
    finally:
        provider.shutdown()
    grpc = config(tmp_path, tracing={"endpoint": "http://tempo:4317", "protocol": "grpc", "headers": {"x-api-key": "k"}})
    assert isinstance(span_exporter(grpc.tracing), GrpcExporter)
    assert traces_url("https://otel.example:4318/") == "https://otel.example:4318/v1/traces"
    assert traces_url("https://otel.example/custom/traces") == "https://otel.example/custom/traces"
