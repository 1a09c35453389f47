"""Tracing across processes: a caller's trace continues through a real gateway (exporting
over OTLP/HTTP to a receiver in this test) into a real emulated worker, which logs the
``x-request-id`` and ``traceparent`` it received (``--log-level debug``); with tracing off,
the worker still gets both, the caller's traceparent unchanged."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.integration.conftest import speech_body, wait_until, worker_saw
from tests.support.procs import Proc, free_port, running_emulator
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    service: str


class OtlpReceiver:
    """The OTLP/HTTP traces endpoint of a collector, enough to see what a gateway exports."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (the stdlib's name)
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf":
                    receiver._take(ExportTraceServiceRequest.FromString(body))
                    self.send_response(200)
                else:
                    self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _take(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            for resource_spans in request.resource_spans:
                attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            ReceivedSpan(span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), attributes["service.name"])
                        )

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Setup:
    traced: Proc  # a gateway exporting to the receiver
    untraced: Proc  # a gateway without tracing, on the same workers
    workers: list[Proc]
    receiver: OtlpReceiver


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("tracing")
    with ExitStack() as stack:
        receiver = stack.enter_context(OtlpReceiver())
        debug = ["--log-level", "debug"]
        ll = stack.enter_context(running_emulator(tmp, LL_PROFILE, 0.02, debug, name="ll"))
        ht = stack.enter_context(running_emulator(tmp, HT_PROFILE, 0.02, debug, name="ht"))
        traced_config = gateway_config(
            tmp, [ll.url], [ht.url], free_port(), {"tracing": {"endpoint": receiver.url, "service_name": "gw-under-test"}}
        )
        # Export within a tenth of a second instead of the SDK's five.
        traced = stack.enter_context(running_gateway(tmp, traced_config, name="traced", env={"OTEL_BSP_SCHEDULE_DELAY": "100"}))
        untraced_config = gateway_config(tmp / "untraced", [ll.url], [ht.url], free_port())
        untraced = stack.enter_context(running_gateway(tmp, untraced_config, name="untraced"))
        yield Setup(traced, untraced, [ll, ht], receiver)



def speak(gateway: Proc, headers: dict[str, str]) -> httpx.Response:
    response = httpx.post(
        f"{gateway.url}/v1/audio/speech", json=speech_body(response_format="pcm"), headers={"x-sla-class": "latency", **headers}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response


def test_the_callers_trace_runs_through_the_gateway_into_the_worker(setup: Setup) -> None:
    response = speak(setup.traced, {"traceparent": CALLER, "tracestate": "caller=1", "x-request-id": "trace-it-1"})
    assert response.headers["x-request-id"] == "trace-it-1"
    spans = wait_until(lambda: (s := setup.receiver.trace(CALLER_TRACE)) and len(s) >= 8 and s, 15, "the gateway's spans exported")
    by_name = {span.name: span for span in spans}
    assert {"POST /v1/audio/speech", "admission", "route", "worker request", "connect", "first byte", "stream", "encode"} <= by_name.keys()
    assert {span.service for span in spans} == {"gw-under-test"}
    root, attempt = by_name["POST /v1/audio/speech"], by_name["worker request"]
    assert root.parent_span_id == CALLER_SPAN and attempt.parent_span_id == root.span_id
    # The worker received the request id and the gateway's attempt span as its parent.
    traceparent, tracestate = worker_saw(setup.workers, "trace-it-1")
    assert traceparent == f"00-{CALLER_TRACE}-{attempt.span_id}-01"
    assert tracestate == "caller=1"
    # The gateway's access line names the trace.
    # (Whole lines only, polled: the line may still be being written as the file is read.)
    def traced_access_line() -> bool:
        access = [line for line in setup.traced.json_lines() if line.get("logger") == "higgs_gateway.access"]
        return any(line["request_id"] == "trace-it-1" and line["trace_id"] == CALLER_TRACE for line in access)

    wait_until(traced_access_line, message="the access line naming the trace")


def test_without_tracing_the_worker_still_gets_the_request_id_and_the_callers_traceparent(setup: Setup) -> None:
    with_trace = speak(setup.untraced, {"traceparent": CALLER})
    assert worker_saw(setup.workers, with_trace.headers["x-request-id"])[0] == CALLER
    without = speak(setup.untraced, {})
    assert worker_saw(setup.workers, without.headers["x-request-id"])[0] == "None"
