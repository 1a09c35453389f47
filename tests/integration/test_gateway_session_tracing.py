"""Voice sessions traced across processes: real emulated workers (``--log-level debug``:
each logs the ``x-request-id`` and ``traceparent`` it received), a gateway in this process
under uvicorn recording spans into an in-memory exporter, and a gateway process without
tracing on the same workers.

Every sentence reaches the worker with its own id (the session's, ``-u<utterance>-s<sentence>``)
and a traceparent: the sentence's ``worker request`` span with tracing on, the handshake's
unchanged with it off. With tracing on a session is one SERVER span with a ``sentence`` per
request under it, and a barge-in ends every span it stops."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gateway.app import create_app
from gateway.config import load_config
from tests.integration.conftest import serving_in_thread, wait_until, worker_saw
from tests.integration.test_emulator_speech_stream import Message, Session
from tests.support.procs import Proc, free_port, running_emulator
from tests.support.spans import OpenSpans, children
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
MODEL = "bosonai/higgs-audio-v3-tts-4b"
PCM_STREAM = {"model": MODEL, "response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}
LONG_SENTENCE = " ".join(["The long sentence keeps on going and going"] * 6) + "."
SESSION_SPAN = "GET /v1/audio/speech/stream"
STEPS = ["admission", "route", "worker request"]
PHASES = ["connect", "first byte", "stream"]


@dataclass
class Setup:
    traced: str  # a gateway in this process, spans into ``exporter``
    untraced: Proc  # a gateway process without tracing
    workers: list[Proc]
    exporter: InMemorySpanExporter
    open_spans: OpenSpans


@contextmanager
def gateway_in_process(config: dict[str, Any], provider: TracerProvider) -> Iterator[str]:
    with serving_in_thread(create_app(load_config(overrides=config), tracer_provider=provider), config["server"]["port"]) as url:
        yield url


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("session-tracing")
    exporter, open_spans = InMemorySpanExporter(), OpenSpans()
    provider = TracerProvider()
    provider.add_span_processor(open_spans)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with ExitStack() as stack:
        debug = ["--log-level", "debug"]
        # Half real time: a long sentence streams for seconds, long enough to be cut by a barge-in.
        ll = stack.enter_context(running_emulator(tmp, LL_PROFILE, 0.5, debug, name="ll"))
        ht = stack.enter_context(running_emulator(tmp, HT_PROFILE, 0.5, debug, name="ht"))
        traced_config = gateway_config(tmp / "traced", [ll.url], [ht.url], free_port())
        traced = stack.enter_context(gateway_in_process(traced_config, provider))
        wait_until(lambda: routable(traced), 60, "both workers routable in the traced gateway")
        untraced_config = gateway_config(tmp / "untraced", [ll.url], [ht.url], free_port())
        untraced = stack.enter_context(running_gateway(tmp, untraced_config, name="untraced"))
        yield Setup(traced, untraced, [ll, ht], exporter, open_spans)
        provider.shutdown()


def routable(url: str) -> bool:
    return httpx.get(f"{url}/ready?require=every_pool", timeout=5).status_code == 200


@contextmanager
def session_on(url: str, headers: dict[str, str]) -> Iterator[Session]:
    with connect(url.replace("http://", "ws://") + "/v1/audio/speech/stream", max_size=None, additional_headers=headers) as ws:
        assert ws.response is not None and ws.response.headers["x-request-id"] == headers["x-request-id"]
        session = Session(ws)
        session.send("session.config", **PCM_STREAM)
        yield session



def session_spans(setup: Setup, request_id: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The session's SERVER span (once ended: the session is over) and every span of its trace."""

    def root() -> ReadableSpan | None:
        for span in setup.exporter.get_finished_spans():
            if span.name == SESSION_SPAN and span.attributes is not None and span.attributes.get("higgs.request_id") == request_id:
                return span
        return None

    session = wait_until(root, 20, f"the session span of {request_id}")
    trace_id = session.context.trace_id
    return session, [span for span in setup.exporter.get_finished_spans() if span.context.trace_id == trace_id]


def audio_of(messages: list[Message]) -> int:
    return sum(len(m) for m in messages if isinstance(m, bytes))


def test_a_traced_session_is_one_span_with_a_request_per_sentence(setup: Setup) -> None:
    with session_on(setup.traced, {"traceparent": CALLER, "x-request-id": "sess-traced-1"}) as session:
        messages = session.utterance("The first sentence is here. ", "And the second one.")
        assert audio_of(messages) > 0
        session.send("session.close")
    root, spans = session_spans(setup, "sess-traced-1")
    assert root.kind is SpanKind.SERVER and format_trace_id(root.context.trace_id) == CALLER_TRACE
    assert root.parent is not None and format_span_id(root.parent.span_id) == CALLER_SPAN
    assert {
        "higgs.request_id": "sess-traced-1", "http.response.status_code": 101, "higgs.session.end": "closed",
        "higgs.session.utterances": 1, "higgs.session.sentences": 2, "higgs.model": MODEL, "higgs.response_format": "pcm",
    }.items() <= dict(root.attributes or {}).items()  # fmt: skip
    assert root.status.status_code is StatusCode.UNSET
    sentences = children(spans, root)
    assert [span.name for span in sentences] == ["sentence", "sentence"]
    for index, sentence in enumerate(sentences):
        attributes = dict(sentence.attributes or {})
        request_id = f"sess-traced-1-u0-s{index}"
        assert attributes["higgs.request_id"] == request_id
        assert (attributes["higgs.utterance"], attributes["higgs.sentence"]) == (0, index)
        assert attributes["higgs.sentence.outcome"] == "completed" and attributes["higgs.pool"] in ("low_latency", "high_throughput")
        assert attributes["higgs.route.reason"] and attributes["higgs.audio_s"] != 0
        # The first sentence is what the listener waits for (`latency`); a later one has a deadline.
        assert attributes["higgs.sla_class"] == ("latency" if index == 0 else "balanced")
        assert ("higgs.deadline_ms" in attributes) is (index > 0)
        steps = children(spans, sentence)
        assert [span.name for span in steps] == STEPS
        attempt = steps[2]
        assert attempt.kind is SpanKind.CLIENT and [span.name for span in children(spans, attempt)] == PHASES
        # The worker got the sentence's own id, and the attempt span as its parent.
        traceparent, _ = worker_saw(setup.workers, request_id)
        assert traceparent == f"00-{CALLER_TRACE}-{format_span_id(attempt.context.span_id)}-01"
    assert setup.open_spans.open == []


def test_a_barge_in_ends_every_span_it_stops(setup: Setup) -> None:
    with session_on(setup.traced, {"x-request-id": "sess-traced-2"}) as session:
        for _ in range(3):
            session.send("input.text", text=LONG_SENTENCE + " ")
        while not isinstance(session.recv(), bytes):  # audio flows: the first sentence streams
            pass
        session.send("input.cancel")
        session.until("input.cancelled")
        after = session.utterance("Hello again.")
        assert audio_of(after) > 0
        session.send("session.close")
    root, spans = session_spans(setup, "sess-traced-2")
    assert root.parent is None  # no traceparent at the handshake: the trace starts here
    assert (root.attributes or {})["higgs.session.utterances"] == 2
    sentences = children(spans, root)
    by_id = {(s.attributes or {})["higgs.request_id"]: s for s in sentences}
    # The third long sentence waits for the second's first audio: it may never have been sent.
    assert {"sess-traced-2-u0-s0", "sess-traced-2-u1-s0"} <= by_id.keys() <= {f"sess-traced-2-u0-s{i}" for i in range(3)} | {"sess-traced-2-u1-s0"}
    first = by_id["sess-traced-2-u0-s0"]
    # Streaming for seconds when the cancel came: cancelled, which is no error of the server.
    assert (first.attributes or {})["higgs.sentence.outcome"] == "cancelled"
    assert first.status.status_code is StatusCode.UNSET
    attempt = children(spans, first)[-1]
    assert attempt.name == "worker request" and (attempt.attributes or {})["higgs.stream.outcome"] == "client_disconnected"
    assert [span.name for span in children(spans, attempt)] == PHASES
    assert (by_id["sess-traced-2-u1-s0"].attributes or {})["higgs.sentence.outcome"] == "completed"
    for span in sentences:
        assert (span.attributes or {})["higgs.sentence.outcome"] in ("cancelled", "completed")
    assert setup.open_spans.open == []  # nothing the barge-in stopped was left open


def test_without_tracing_each_sentence_carries_its_id_and_the_callers_traceparent(setup: Setup) -> None:
    url = setup.untraced.url
    with session_on(url, {"traceparent": CALLER, "tracestate": "caller=1", "x-request-id": "sess-plain-1"}) as session:
        session.utterance("The first sentence is here. ", "And the second one.")
        session.utterance("A second utterance.")
        session.send("session.close")
    for request_id in ("sess-plain-1-u0-s0", "sess-plain-1-u0-s1", "sess-plain-1-u1-s0"):
        assert worker_saw(setup.workers, request_id) == (CALLER, "caller=1")
    with session_on(url, {"x-request-id": "sess-plain-2"}) as session:
        session.utterance("Without a trace.")
        session.send("session.close")
    assert worker_saw(setup.workers, "sess-plain-2-u0-s0") == ("None", "None")
    # The session's own log lines carry its id. Its end is logged once the gateway has
    # closed its side, which may come after the client's close returned: wait for it.
    def ended_lines() -> list[dict[str, Any]]:
        return [line for line in setup.untraced.json_lines() if line.get("msg", "").startswith("voice session sess-plain-1 ended")]

    ended = wait_until(ended_lines, message="the session's end logged")
    placed = [line for line in setup.untraced.json_lines() if line.get("msg", "").startswith("session sentence") and "placed" in line["msg"]]
    assert "sess-plain-1" in {line.get("request_id") for line in placed}
    assert ended and ended[0]["request_id"] == "sess-plain-1" and ended[0]["trace_id"] == CALLER_TRACE


def test_a_refused_handshake_is_a_session_span_saying_why(setup: Setup) -> None:
    url = setup.traced.replace("http://", "ws://") + "/v1/audio/speech/stream"
    headers = {"x-request-id": "sess-denied-1", "origin": "https://elsewhere.example"}
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers=headers)
    assert refused.value.response.status_code == 403
    root, spans = session_spans(setup, "sess-denied-1")
    assert spans == [root]
    assert {
        "http.response.status_code": 403, "higgs.session.end": "denied", "error.type": "origin_not_allowed",
        "higgs.session.utterances": 0, "higgs.session.sentences": 0,
    }.items() <= dict(root.attributes or {}).items()  # fmt: skip
    assert root.status.status_code is StatusCode.UNSET  # the client's doing, as a 4xx is
