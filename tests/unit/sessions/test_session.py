"""A voice session over a fake socket and the fake worker transport (no process, no port):
real admission, relay, pipeline and session loop; the test decides when each worker
sends audio. Pipelining and strict order, the deadline routing of later sentences,
barge-in and closing ending every upstream request, and no task or slot left behind.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from gateway.audio.factory import open_encoder
from gateway.config import load_config
from gateway.security.ref_audio import RefAudioPolicy
from gateway.sessions.key import SessionKey
from gateway.sessions.outbox import Outbox
from gateway.sessions.pipeline import SentencePipeline
from gateway.sessions.sentence import SentenceUpstream
from gateway.sessions.session import Session, SessionEnd, SessionLimits
from gateway.sessions.voice import SessionVoices
from gateway.telemetry.propagation import UNTRACED_SESSION
from gateway.telemetry.tracing import SessionTrace
from gateway.types import SPEECH_PATH
from gateway.upstream.call import Upstream
from gateway.upstream.events import AttemptEnded, HealthReports, StreamEnded
from gateway.upstream.relay import Relay
from gateway.voices.store import VoiceStore
from gateway.types import SlaClass
from gateway.types.codec import BYTES_PER_SECOND
from gateway.types.observations import StreamOutcome
from gateway.worker_payload import WorkerPayloads
from tests.support.deadline import until, within
from tests.unit.sessions.fakes import NullSessionObserver
from tests.unit.upstream.fakes import (
    AWAITS_BEFORE_AUDIO, HANG, HT_URL, LL2_URL, LL_URL, FaultyTransport, failing_then_serving, ready_fleet,
)

PCM = b"\x01\x00" * 960  # 40 ms
CONFIG = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}


class GatedResponse:
    """A worker's PCM stream the test feeds chunk by chunk (``None`` ends it)."""

    status = 200

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.sent_headers: dict[str, str] = {}  # x-request-id, traceparent: what the worker got
        self.feed: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False
        self.closed_event = asyncio.Event()  # the gateway is done with this stream

    async def chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self.feed.get()) is not None:
            yield chunk

    async def read(self) -> bytes:
        return b""

    async def close(self) -> None:
        self.closed = True
        self.closed_event.set()


class GatedTransport:
    def __init__(self) -> None:
        self.opened: list[tuple[str, GatedResponse]] = []  # (worker base URL, its stream)
        self.new = asyncio.Event()

    async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> GatedResponse:
        response = GatedResponse(body)
        response.sent_headers = dict(headers or {})
        self.opened.append((url.removesuffix(SPEECH_PATH), response))
        self.new.set()
        return response

    async def nth(self, index: int) -> tuple[str, GatedResponse]:
        while len(self.opened) <= index:
            self.new.clear()
            await self.new.wait()
        return self.opened[index]

    async def close(self) -> None:
        pass


class FakeSocket:
    def __init__(self) -> None:
        self.incoming: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.sent: list[Any] = []  # decoded JSON messages and raw audio frames
        self.closed_with: int | None = None
        self.changed = asyncio.Event()

    def client_sends(self, message: dict[str, Any] | bytes | None) -> None:
        self.incoming.put_nowait(json.dumps(message) if isinstance(message, dict) else message)

    async def receive(self) -> str | bytes | None:
        return await self.incoming.get()

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))
        self.changed.set()

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)
        self.changed.set()

    async def close(self, code: int, reason: str = "") -> None:
        self.closed_with = code
        self.close_reason = reason

    async def until(self, kind: str) -> dict[str, Any]:
        while True:
            for message in self.sent:
                if isinstance(message, dict) and message["type"] == kind:
                    return message
            self.changed.clear()
            await self.changed.wait()


class Records:
    """The recorder as a sentence reaches it: its admission when it ends (``admission_done``),
    its attempts and streams as the relay's events."""

    def __init__(self) -> None:
        self.done: list[tuple[SlaClass, float | None, str | None]] = []
        self.attempts: list[AttemptEnded] = []
        self.ends: list[StreamEnded] = []

    def admission_done(self, sla: SlaClass, queue_wait_s: float | None, rejected: str | None) -> None:
        self.done.append((sla, queue_wait_s, rejected))

    def attempt_ended(self, event: AttemptEnded) -> None:
        self.attempts.append(event)

    def stream_ended(self, event: StreamEnded) -> None:
        self.ends.append(event)


class Rig:
    def __init__(self, tmp_path: Path, trace: SessionTrace = UNTRACED_SESSION, slots: int | None = None,
                 idle_timeout_s: float = 5.0, *, limits: SessionLimits | None = None, key: SessionKey | None = None,
                 socket: FakeSocket | None = None, clock: Callable[[], float] | None = None,
                 transport: Any = None) -> None:  # fmt: skip
        config = load_config(overrides={"data_dir": str(tmp_path)})
        self.fleet, self.admission = ready_fleet(tmp_path, slots=slots)
        self.transport = transport if transport is not None else GatedTransport()
        self.records = Records()
        relay = Relay(self.transport, (HealthReports(self.fleet.health), self.records), self.admission, config.upstream)  # type: ignore[arg-type]
        self.socket = socket if socket is not None else FakeSocket()
        limits = limits if limits is not None else SessionLimits(5.0, idle_timeout_s, 1000)
        self.outbox = outbox = Outbox(self.socket, limits.send_timeout_s)
        clock = clock if clock is not None else asyncio.get_running_loop().time
        self.pipeline = SentencePipeline(
            outbox, SentenceUpstream(Upstream(self.admission, relay), clock, self.records), open_encoder, NullSessionObserver(),
            trace=trace, lookahead_s=limits.lookahead_s, key=key,
        )  # fmt: skip
        payloads = WorkerPayloads(config.models, config.voices, VoiceStore.in_data_dir(tmp_path), RefAudioPolicy(config.auth))
        voices = SessionVoices(payloads, new_seed=lambda: 42)
        self.session = Session(self.socket, outbox, self.pipeline, voices, limits, asyncio.get_running_loop().time, NullSessionObserver(), key)

    async def run(self) -> SessionEnd:
        try:
            return await self.session.run()
        finally:
            await self.pipeline.close()

    def inflight(self) -> int:
        return sum(worker.inflight for worker in self.fleet.view.workers)


def frames(sent: list[Any]) -> list[Any]:
    """Messages as the client saw them: audio frames by content, JSON by type and index."""
    return [m if isinstance(m, bytes) else (m["type"], m.get("sentence_index")) for m in sent if isinstance(m, bytes) or m["type"] != "error"]


async def test_sentence_two_is_synthesized_while_one_streams_and_audio_stays_in_order(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "First sentence here. Second one. "})
    rig.socket.client_sends({"type": "input.done"})
    first_url, first = await rig.transport.nth(0)
    assert first_url in (LL_URL, LL2_URL)  # the first sentence: `latency`, on low-latency
    assert len(rig.transport.opened) == 1  # the second waits for the first's audio
    first.feed.put_nowait(b"A" * 1920)
    second_url, second = await rig.transport.nth(1)
    # Requested while the first still streams, and due seconds away: high-throughput.
    assert second_url == HT_URL and not first.closed
    assert second.body["seed"] == first.body["seed"] == 42  # one voice for the whole reply
    second.feed.put_nowait(b"B" * 1920)
    second.feed.put_nowait(None)  # the second is finished before the first
    await within(5, second.closed_event.wait())  # read to its end and closed: its audio is all buffered
    assert [m for m in rig.socket.sent if isinstance(m, bytes)] == [b"A" * 1920]  # its audio waits its turn
    first.feed.put_nowait(b"C" * 1920)
    first.feed.put_nowait(None)
    await rig.socket.until("session.done")
    assert frames(rig.socket.sent) == [
        ("audio.start", 0), b"A" * 1920, b"C" * 1920, ("audio.done", 0),
        ("audio.start", 1), b"B" * 1920, ("audio.done", 1), ("session.done", None),
    ]  # fmt: skip
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED
    assert rig.socket.closed_with == 1000 and rig.inflight() == 0
    # Each sentence's attempt and stream told once: its placement and its stream.
    recorded = sorted((end.observation.worker_id, [end.observation.outcome]) for end in rig.records.ends)
    first_worker = {LL_URL: "ll-0", LL2_URL: "ll-1"}[first_url]
    assert recorded == sorted([("ht-0", [StreamOutcome.COMPLETED]), (first_worker, [StreamOutcome.COMPLETED])])
    assert sorted(a.decision.worker_id for a in rig.records.attempts) == sorted(e.observation.worker_id for e in rig.records.ends)
    assert all(waited is not None and rejected is None for _, waited, rejected in rig.records.done)


async def test_a_client_whose_reply_just_ended_is_not_idle(tmp_path: Path) -> None:
    """The idle timeout counts from the later of the client's last message and the last
    delivery: a reply delivered over longer than the timeout must not end the session the
    moment it is done (the timer started at the client's last message had nearly run out)."""
    idle_s = 2.0
    rig = Rig(tmp_path, idle_timeout_s=idle_s)
    run = asyncio.create_task(rig.run())
    loop = asyncio.get_running_loop()
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "A reply that takes a while."})
    rig.socket.client_sends({"type": "input.done"})
    last_message = loop.time()
    _, first = await rig.transport.nth(0)
    await asyncio.sleep(0.75 * idle_s)  # the worker is slow: nothing delivered yet
    first.feed.put_nowait(PCM)
    first.feed.put_nowait(None)
    await rig.socket.until("session.done")
    # Past the idle timeout since the client's last message, well within it since the delivery.
    await asyncio.sleep(max(0.0, last_message + 1.15 * idle_s - loop.time()))
    assert not any(isinstance(m, dict) and m["type"] == "error" for m in rig.socket.sent), rig.socket.sent
    assert not run.done()
    rig.socket.client_sends({"type": "input.text", "text": "Next."})
    rig.socket.client_sends({"type": "input.done"})
    _, second = await rig.transport.nth(1)
    fed = loop.time()  # its delivery comes after this
    second.feed.put_nowait(PCM)
    second.feed.put_nowait(None)
    # Quiet from here on: the session ends a whole idle timeout after that delivery, not before.
    assert await within(4 * idle_s, run) is SessionEnd.TIMEOUT
    assert loop.time() - fed >= idle_s
    assert [m["type"] for m in rig.socket.sent if isinstance(m, dict)].count("session.done") == 2
    assert {"type": "error", "message": "Idle timeout: no message received"} in rig.socket.sent


async def test_barge_in_cancels_every_request_at_once_and_the_session_goes_on(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    tasks_before = asyncio.all_tasks()
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "One is here. Two is here. Three is here. Four"})
    _, first = await rig.transport.nth(0)
    first.feed.put_nowait(PCM)
    _, second = await rig.transport.nth(1)  # in flight, no audio yet; three waits its turn
    assert rig.inflight() == 2
    rig.socket.client_sends({"type": "input.cancel"})
    cancelled = await rig.socket.until("input.cancelled")
    assert cancelled == {"type": "input.cancelled", "utterance_index": 0, "total_bytes": len(PCM)}
    assert first.closed and second.closed  # dropped upstream: the workers abort them
    assert rig.inflight() == 0 and len(rig.transport.opened) == 2
    first.feed.put_nowait(PCM)  # a worker still sending: none of it reaches the client
    # The next utterance is number 1; the unsent "Four" went with the cancelled one.
    rig.socket.client_sends({"type": "input.text", "text": "Again."})
    rig.socket.client_sends({"type": "input.done"})
    _, third = await rig.transport.nth(2)
    assert third.body["input"] == "Again."
    third.feed.put_nowait(b"Z" * 1920)
    third.feed.put_nowait(None)
    done = await rig.socket.until("session.done")
    assert done == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    after = rig.socket.sent[rig.socket.sent.index(cancelled) + 1 :]
    assert [m for m in after if isinstance(m, bytes)] == [b"Z" * 1920]
    rig.socket.client_sends(None)  # the client leaves
    assert await run is SessionEnd.CLIENT_GONE
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - tasks_before <= {run}  # no sentence or delivery task left


async def test_after_a_barge_in_the_next_reply_is_requested_at_once(tmp_path: Path) -> None:
    """The listener's player drops what it had not played: a reply after a barge-in is not
    held back until the cancelled audio would have played out (it was, by all of that audio
    past the look-ahead window: 50 s here)."""
    rig = Rig(tmp_path)  # a 10 s window
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "One long sentence here. "})
    _, first = await rig.transport.nth(0)
    minute = b"\x01\x00" * (BYTES_PER_SECOND * 60 // 2)
    first.feed.put_nowait(minute)  # a fast worker: a minute of audio sent in a moment
    await until(lambda: minute in rig.socket.sent, 5, "the minute of audio delivered")
    rig.socket.client_sends({"type": "input.cancel"})
    await rig.socket.until("input.cancelled")
    rig.socket.client_sends({"type": "input.text", "text": "Again."})
    rig.socket.client_sends({"type": "input.done"})
    _, again = await within(5, rig.transport.nth(1))
    assert again.body["input"] == "Again."
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED
    assert rig.inflight() == 0


async def test_barge_in_while_the_reply_waits_for_text_counts_the_bytes_already_sent(tmp_path: Path) -> None:
    """As when the LLM is slower than the speech: every sentence cut so far is delivered and
    the utterance is open, waiting for more text, when the listener interrupts."""
    rig = Rig(tmp_path)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "One is here. Two is"})
    _, first = await rig.transport.nth(0)
    first.feed.put_nowait(PCM)
    first.feed.put_nowait(None)
    await rig.socket.until("audio.done")
    rig.socket.client_sends({"type": "input.cancel"})
    cancelled = await rig.socket.until("input.cancelled")
    assert cancelled == {"type": "input.cancelled", "utterance_index": 0, "total_bytes": len(PCM)}
    assert [m["type"] for m in rig.socket.sent if isinstance(m, dict)].count("input.cancelled") == 1
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED
    assert rig.inflight() == 0


async def test_a_client_that_leaves_mid_sentence_frees_every_slot(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "Some words here. More words there. "})
    _, first = await rig.transport.nth(0)
    first.feed.put_nowait(PCM)
    _, second = await rig.transport.nth(1)
    rig.socket.client_sends(None)
    assert await run is SessionEnd.CLIENT_GONE
    assert first.closed and second.closed and rig.inflight() == 0
    assert rig.admission.queue_depths() == {sla: 0 for sla in rig.admission.queue_depths()}


async def test_a_sentence_that_fails_is_reported_and_the_session_continues(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends({**CONFIG, "voice": "no-such-voice"})
    rig.socket.client_sends({"type": "input.text", "text": "Hello."})
    rig.socket.client_sends({"type": "input.done"})
    await rig.socket.until("session.done")
    error, done = [m for m in rig.socket.sent if m["type"] in ("error", "audio.done")]
    assert error["message"].startswith("Generation failed for utterance 0, sentence 0: ")
    assert done == {"type": "audio.done", "utterance_index": 0, "sentence_index": 0, "total_bytes": 0, "error": True}
    assert rig.transport.opened == []  # never sent to a worker
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED


async def test_the_awaits_before_a_sentences_first_byte_are_the_ones_the_fault_tests_hit(tmp_path: Path) -> None:
    transport = FaultyTransport(failing_then_serving(PCM))
    rig = Rig(tmp_path, transport=transport)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "Hello there."})
    rig.socket.client_sends({"type": "input.done"})
    await rig.socket.until("session.done")
    assert [m for m in rig.socket.sent if isinstance(m, bytes)] == [PCM]
    assert tuple(transport.steps[: len(AWAITS_BEFORE_AUDIO)]) == AWAITS_BEFORE_AUDIO
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED


@pytest.mark.parametrize("fault", ["exception", "cancellation"])
@pytest.mark.parametrize("step", range(len(AWAITS_BEFORE_AUDIO)), ids=lambda i: f"{i}-{AWAITS_BEFORE_AUDIO[i]}")
async def test_a_sentence_failing_at_any_await_between_admission_and_the_first_byte_leaves_no_slot_held(
    tmp_path: Path, step: int, fault: str
) -> None:
    transport = FaultyTransport(failing_then_serving(PCM), step, HANG if fault == "cancellation" else RuntimeError("injected"))
    rig = Rig(tmp_path, transport=transport)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "Hello there."})
    rig.socket.client_sends({"type": "input.done"})
    await within(5, transport.reached.wait())
    if fault == "cancellation":
        rig.socket.client_sends({"type": "input.cancel"})  # barge-in while the sentence hangs there
        await rig.socket.until("input.cancelled")
    else:
        done = await rig.socket.until("audio.done")
        # A failed close of the dropped attempt changes nothing: the retry serves the sentence.
        assert done.get("error", False) is (AWAITS_BEFORE_AUDIO[step] != "close")
    assert rig.inflight() == 0
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED
    assert rig.inflight() == 0
