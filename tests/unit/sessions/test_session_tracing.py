"""A session's trace over the fake socket and worker transport: the headers each sentence
is sent with (tracing off, on, sampled out) and the spans of sentences stopped where the
test decides: queued in admission, refused before they are sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

from gateway.sessions.session import SessionEnd
from gateway.telemetry.propagation import PassThroughTracing
from gateway.telemetry.tracing import OtelTracing
from tests.support.spans import OpenSpans, children
from tests.unit.sessions.test_session import CONFIG, PCM, Rig
from tests.unit.test_tracing import calls_into

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER = f"00-{CALLER_TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def open_spans() -> OpenSpans:
    return OpenSpans()


@pytest.fixture
def provider(exporter: InMemorySpanExporter, open_spans: OpenSpans) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(open_spans)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


async def finish(rig: Rig, run: asyncio.Task[SessionEnd]) -> None:
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED
    assert rig.inflight() == 0


async def test_without_tracing_a_sentence_runs_no_tracing_code(tmp_path: Path) -> None:
    from gateway.telemetry import tracing

    rig = Rig(tmp_path, PassThroughTracing().session([(b"traceparent", CALLER.encode())], "sess-1"))
    run = asyncio.create_task(rig.run())
    with calls_into(tracing) as entered:
        rig.socket.client_sends(CONFIG)
        rig.socket.client_sends({"type": "input.text", "text": "First one here. "})
        _, response = await rig.transport.nth(0)
        response.feed.put_nowait(PCM)
        response.feed.put_nowait(None)
        await rig.socket.until("audio.done")
    assert entered == []
    await finish(rig, run)


async def test_without_tracing_each_sentence_has_its_own_id_and_the_callers_trace(tmp_path: Path) -> None:
    handshake = [(b"traceparent", CALLER.encode()), (b"tracestate", b"a=1")]
    rig = Rig(tmp_path, PassThroughTracing().session(handshake, "sess-1"))
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "First one here. Second one. "})
    for index in range(2):
        _, response = await rig.transport.nth(index)
        assert response.sent_headers == {"x-request-id": f"sess-1-u0-s{index}", "traceparent": CALLER, "tracestate": "a=1"}
        response.feed.put_nowait(PCM)
        response.feed.put_nowait(None)
    await finish(rig, run)
    # No traceparent at the handshake (or a malformed one): the id alone.
    bare = PassThroughTracing().session([(b"traceparent", b"00-xyz-1-01")], "sess-2")
    assert bare.trace_id is None
    untraced = Rig(tmp_path / "bare", bare)
    run = asyncio.create_task(untraced.run())
    untraced.socket.client_sends(CONFIG)
    untraced.socket.client_sends({"type": "input.text", "text": "Hello. "})
    _, response = await untraced.transport.nth(0)
    assert response.sent_headers == {"x-request-id": "sess-2-u0-s0"}
    response.feed.put_nowait(None)
    await finish(untraced, run)


async def test_a_sentence_cancelled_in_admission_ends_its_spans_and_the_next_is_whole(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter, open_spans: OpenSpans
) -> None:
    trace = OtelTracing(provider).session([(b"traceparent", CALLER.encode())], "sess-3")
    rig = Rig(tmp_path, trace, slots=1)
    leases = [rig.fleet.leases.lease(worker.worker_id) for worker in rig.fleet.view.workers]  # every slot taken
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "Waits in the queue. "})
    while sum(rig.admission.queue_depths().values()) == 0:
        await asyncio.sleep(0)
    assert open_spans.open == ["GET /v1/audio/speech/stream", "admission", "sentence"]
    rig.socket.client_sends({"type": "input.cancel"})
    await rig.socket.until("input.cancelled")
    assert open_spans.open == ["GET /v1/audio/speech/stream"]  # the session's own, until it ends
    for lease in leases:
        lease.release()
    rig.socket.client_sends({"type": "input.text", "text": "Then this. "})
    _, response = await rig.transport.nth(0)
    response.feed.put_nowait(PCM)
    response.feed.put_nowait(None)
    await rig.socket.until("audio.done")
    await finish(rig, run)
    assert rig.transport.opened == [rig.transport.opened[0]]  # the cancelled one never reached a worker

    spans = exporter.get_finished_spans()
    cancelled, served = sorted((s for s in spans if s.name == "sentence"), key=lambda s: s.start_time or 0)
    assert cancelled.attributes is not None and served.attributes is not None
    assert format_trace_id(cancelled.context.trace_id) == CALLER_TRACE
    assert cancelled.attributes["higgs.request_id"] == "sess-3-u0-s0" and cancelled.attributes["higgs.sentence.outcome"] == "cancelled"
    assert cancelled.status.status_code is StatusCode.UNSET  # a barge-in is no error
    [admission] = children(spans, cancelled)
    assert admission.name == "admission" and admission.attributes == {"higgs.admission.outcome": "cancelled"}
    assert served.attributes["higgs.request_id"] == "sess-3-u1-s0" and served.attributes["higgs.sentence.outcome"] == "completed"
    assert served.attributes["higgs.pool"] == "low_latency" and served.attributes["higgs.worker"] in ("ll-0", "ll-1")
    admitted, route, attempt = children(spans, served)
    assert [admitted.name, route.name, attempt.name] == ["admission", "route", "worker request"] and attempt.kind is SpanKind.CLIENT
    assert [span.name for span in children(spans, attempt)] == ["connect", "first byte", "stream"]
    assert response.sent_headers == {
        "x-request-id": "sess-3-u1-s0",
        "traceparent": f"00-{CALLER_TRACE}-{format_span_id(attempt.context.span_id)}-01",
    }
    trace.finish(_Summary())
    assert open_spans.open == []


async def test_a_sentence_refused_before_it_is_sent_is_a_span_without_steps(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter, open_spans: OpenSpans
) -> None:
    rig = Rig(tmp_path, OtelTracing(provider).session([], "sess-4"))
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends({**CONFIG, "voice": "no-such-voice"})
    rig.socket.client_sends({"type": "input.text", "text": "Hello."})
    rig.socket.client_sends({"type": "input.done"})
    await rig.socket.until("session.done")
    await finish(rig, run)
    spans = exporter.get_finished_spans()
    [sentence] = [s for s in spans if s.name == "sentence"]
    assert sentence.attributes is not None and sentence.attributes["higgs.sentence.outcome"] == "failed"
    assert sentence.attributes["error.type"] and children(spans, sentence) == []
    assert open_spans.open == ["GET /v1/audio/speech/stream"]


async def test_a_sampled_out_session_records_nothing_and_still_propagates(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.0)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rig = Rig(tmp_path, OtelTracing(provider).session([], "sess-5"))
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "First one here. Second one. "})
    sent = []
    for index in range(2):
        _, response = await rig.transport.nth(index)
        sent.append(response.sent_headers)
        response.feed.put_nowait(PCM)
        response.feed.put_nowait(None)
    await finish(rig, run)
    provider.shutdown()
    assert exporter.get_finished_spans() == ()
    assert [h["x-request-id"] for h in sent] == ["sess-5-u0-s0", "sess-5-u0-s1"]
    # One unsampled trace, the session's span as every sentence's parent.
    assert sent[0]["traceparent"] == sent[1]["traceparent"]
    assert int(sent[0]["traceparent"].rsplit("-", 1)[1], 16) & 1 == 0  # marked not sampled


class _Summary:
    status, end, error, utterances, sentences, model, response_format = 101, "closed", None, 2, 2, None, "pcm"
