"""A session inside its key's limits, over the fake socket and worker transport of test_session:
the look-ahead window (driven by an injected clock), the audio budget and the pause while a
send is blocked (a socket whose sends wait for the test), the key's stream slots and
rate-limit tokens (a fake key), the send timeout, the maximum duration and the text caps.
Nothing here waits for a race: every step waits for the event that makes it happen.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gateway.errors import GatewayError
from gateway.sessions.session import SessionEnd, SessionLimits
from gateway.types.codec import BYTES_PER_SECOND
from tests.support.deadline import within
from tests.unit.sessions.test_session import CONFIG, PCM, FakeSocket, Rig

CHUNK = len(PCM)


def limits(**changes: Any) -> SessionLimits:
    base: dict[str, Any] = {"config_timeout_s": 5.0, "idle_timeout_s": 5.0, "max_buffered_chars": 10_000}
    return SessionLimits(**{**base, **changes})


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class BlockingSocket(FakeSocket):
    """A client that stops reading audio: ``send_bytes`` waits until ``reading`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = asyncio.Event()
        self.blocked = asyncio.Event()  # a send is waiting

    async def send_bytes(self, data: bytes) -> None:
        if not self.reading.is_set():
            self.blocked.set()
            await self.reading.wait()
        await super().send_bytes(data)


class FakeKey:
    """A key with ``limit`` streams (``taken_by_others`` already held) and ``tokens`` to spend."""

    def __init__(self, limit: int, tokens: int = 100, taken_by_others: int = 0) -> None:
        self.limit = limit
        self.tokens = tokens
        self.in_use = taken_by_others
        self.most_in_use = taken_by_others

    async def spend_utterance(self) -> None:
        if self.tokens <= 0:
            raise GatewayError(429, "Rate limit reached for this API key (1 requests/s, burst 1); retry later.")
        self.tokens -= 1

    async def open_stream(self) -> FakeHold | None:
        if self.in_use >= self.limit:
            return None
        self.in_use += 1
        self.most_in_use = max(self.most_in_use, self.in_use)
        return FakeHold(self)


class FakeHold:
    def __init__(self, key: FakeKey) -> None:
        self._key: FakeKey | None = key

    async def close(self) -> None:
        key, self._key = self._key, None
        if key is not None:
            key.in_use -= 1


async def settle() -> None:
    """Let every task that can run, run (nothing here waits on time)."""
    for _ in range(50):
        await asyncio.sleep(0)


def audio_frames(rig: Rig) -> list[bytes]:
    return [m for m in rig.socket.sent if isinstance(m, bytes)]


async def test_a_sentence_is_requested_only_once_a_player_is_within_the_window(tmp_path: Path) -> None:
    clock = FakeClock()
    rig = Rig(tmp_path, limits=limits(lookahead_s=1.0), clock=clock)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "One is here. "})
    _, first = await rig.transport.nth(0)
    for _ in range(50):  # 2 s of audio, all sent at once: a real-time player has 2 s of it to play
        first.feed.put_nowait(PCM)
    first.feed.put_nowait(None)
    await rig.socket.until("audio.done")
    rig.socket.client_sends({"type": "input.text", "text": "Two is here. "})  # the LLM was slower
    await settle()
    assert len(rig.transport.opened) == 1  # 2 s away, the window is 1 s: not yet requested
    clock.now += 0.9
    rig.pipeline.look_again()
    await settle()
    assert len(rig.transport.opened) == 1  # 1.1 s away
    clock.now += 0.2
    rig.pipeline.look_again()  # 0.9 s away: inside the window
    _, second = await within(5, rig.transport.nth(1))
    assert second.body["input"] == "Two is here."
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED and rig.inflight() == 0


async def test_a_client_that_stops_reading_makes_the_session_hold_at_most_the_window(tmp_path: Path) -> None:
    socket = BlockingSocket()
    window_s = 0.5
    rig = Rig(tmp_path, limits=limits(lookahead_s=window_s), socket=socket)
    run = asyncio.create_task(rig.run())
    socket.client_sends(CONFIG)
    socket.client_sends({"type": "input.text", "text": "One is here and it is rather a long sentence to say. "})
    _, first = await rig.transport.nth(0)
    total_chunks = 100  # 4 s of audio, 8 windows
    for _ in range(total_chunks):
        first.feed.put_nowait(PCM)
    first.feed.put_nowait(None)
    await within(5, socket.blocked.wait())  # the first chunk's send waits for the client
    await settle()
    budget, limit = rig.pipeline.budget, round(window_s * BYTES_PER_SECOND)
    assert limit <= budget.buffered <= limit + CHUNK  # held: the window, plus the chunk that filled it
    assert first.feed.qsize() > total_chunks // 2  # the rest waits at the worker, unread
    assert not first.closed and rig.inflight() == 1
    socket.reading.set()  # the client reads again: the rest flows
    socket.client_sends({"type": "input.done"})
    await socket.until("session.done")
    assert len(audio_frames(rig)) == total_chunks and budget.buffered == 0
    socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED and rig.inflight() == 0


async def test_nothing_is_dispatched_while_a_send_to_the_client_is_blocked(tmp_path: Path) -> None:
    socket = BlockingSocket()
    rig = Rig(tmp_path, limits=limits(lookahead_s=10.0), socket=socket)
    run = asyncio.create_task(rig.run())
    socket.client_sends(CONFIG)
    socket.client_sends({"type": "input.text", "text": "One. "})
    _, first = await rig.transport.nth(0)
    first.feed.put_nowait(PCM)
    await within(5, socket.blocked.wait())
    # Sentence two is complete, inside the window, and sentence one has audio: it would go
    # now, but the client is not taking what it was sent.
    socket.client_sends({"type": "input.text", "text": "Two. "})
    await settle()
    assert len(rig.transport.opened) == 1 and rig.outbox.blocked
    socket.reading.set()  # the send completes: sentence two goes
    _, second = await within(5, rig.transport.nth(1))
    second.feed.put_nowait(PCM)
    for response in (first, second):
        response.feed.put_nowait(None)
    socket.client_sends({"type": "input.done"})
    await socket.until("session.done")
    socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED and rig.inflight() == 0


async def test_a_client_that_never_reads_is_ended_after_the_send_timeout_and_frees_every_slot(tmp_path: Path) -> None:
    socket = BlockingSocket()
    key = FakeKey(limit=1)
    rig = Rig(tmp_path, limits=limits(send_timeout_s=0.2), socket=socket, key=key)
    run = asyncio.create_task(rig.run())
    socket.client_sends(CONFIG)
    socket.client_sends({"type": "input.text", "text": "One is here. Two is here. Three is here. "})
    _, first = await rig.transport.nth(0)
    first.feed.put_nowait(PCM)
    assert await within(5, run) is SessionEnd.STALLED  # the send never completes
    assert socket.closed_with == 1008 and socket.close_reason == "client stopped reading"
    assert first.closed and rig.inflight() == 0 and key.in_use == 0
    assert rig.pipeline.budget.buffered == 0


async def test_sentences_in_flight_hold_the_keys_stream_slots_and_hand_them_on(tmp_path: Path) -> None:
    key = FakeKey(limit=1)
    rig = Rig(tmp_path, key=key)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "One is here. Two is here. Three is here. "})
    _, first = await rig.transport.nth(0)
    first.feed.put_nowait(PCM)  # first audio: sentence two is dispatched, and waits for the key's one slot
    await settle()
    assert len(rig.transport.opened) == 1 and key.in_use == 1
    first.feed.put_nowait(None)  # sentence one's request ends: its slot goes straight to two
    _, second = await within(5, rig.transport.nth(1))
    second.feed.put_nowait(PCM)
    await settle()
    assert len(rig.transport.opened) == 2  # three waits for two's slot
    rig.socket.client_sends({"type": "input.cancel"})  # barge-in while three waits
    await rig.socket.until("input.cancelled")
    assert second.closed and rig.inflight() == 0
    assert key.in_use == 0 and key.most_in_use == 1
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED


async def test_a_sentence_fails_when_the_keys_other_requests_hold_every_slot(tmp_path: Path) -> None:
    key = FakeKey(limit=1, taken_by_others=1)
    rig = Rig(tmp_path, key=key)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "Hello."})
    rig.socket.client_sends({"type": "input.done"})
    await rig.socket.until("session.done")
    error = next(m for m in rig.socket.sent if isinstance(m, dict) and m["type"] == "error")
    assert error["message"].startswith("Generation failed for utterance 0, sentence 0: every concurrent stream of this API key")
    assert await rig.socket.until("audio.done") == {"type": "audio.done", "utterance_index": 0, "sentence_index": 0, "total_bytes": 0, "error": True}
    assert rig.transport.opened == [] and key.in_use == 1
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED


async def test_each_utterance_spends_a_token_and_a_refused_one_is_dropped_whole(tmp_path: Path) -> None:
    key = FakeKey(limit=5, tokens=1)  # the handshake paid for utterance 0; one more token
    rig = Rig(tmp_path, key=key)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    for utterance in range(3):
        rig.socket.client_sends({"type": "input.text", "text": f"Reply {utterance} "})
        rig.socket.client_sends({"type": "input.text", "text": "goes on."})
        rig.socket.client_sends({"type": "input.done"})
    for index in range(2):
        _, response = await rig.transport.nth(index)
        response.feed.put_nowait(PCM)
        response.feed.put_nowait(None)
    while sum(1 for m in rig.socket.sent if isinstance(m, dict) and m["type"] == "session.done") < 3:
        rig.socket.changed.clear()
        await rig.socket.changed.wait()
    assert [r.body["input"] for _, r in rig.transport.opened] == ["Reply 0 goes on.", "Reply 1 goes on."]
    errors = [m["message"] for m in rig.socket.sent if isinstance(m, dict) and m["type"] == "error"]
    assert errors == ["Utterance 2 refused: Rate limit reached for this API key (1 requests/s, burst 1); retry later. Its text is dropped until input.done."]
    dones = [m for m in rig.socket.sent if isinstance(m, dict) and m["type"] == "session.done"]
    assert dones[-1] == {"type": "session.done", "utterance_index": 2, "total_sentences": 0}
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED


async def test_a_session_ends_at_its_maximum_duration(tmp_path: Path) -> None:
    rig = Rig(tmp_path, limits=limits(max_duration_s=0.2))
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    assert await within(5, run) is SessionEnd.MAX_DURATION
    assert {"type": "error", "message": "Session reached its maximum duration (0.2 s); open a new one"} in rig.socket.sent
    assert rig.socket.closed_with == 1008 and rig.socket.close_reason == "maximum session duration reached"


async def test_queued_sentences_and_sentence_length_are_capped(tmp_path: Path) -> None:
    clock = FakeClock()
    rig = Rig(tmp_path, limits=limits(lookahead_s=0.5, max_queued_sentences=2), clock=clock)
    run = asyncio.create_task(rig.run())
    rig.socket.client_sends(CONFIG)
    rig.socket.client_sends({"type": "input.text", "text": "One. "})
    _, first = await rig.transport.nth(0)
    for _ in range(50):
        first.feed.put_nowait(PCM)  # 2 s sent: later sentences wait outside the 0.5 s window
    first.feed.put_nowait(None)
    await rig.socket.until("audio.done")
    rig.socket.client_sends({"type": "input.text", "text": "Two. Three. Four. "})  # three queued: refused whole
    rig.socket.client_sends({"type": "input.text", "text": "Two. Three. "})  # two: taken
    rig.socket.client_sends({"type": "input.text", "text": "Four. "})  # a third: refused
    rig.socket.client_sends({"type": "input.text", "text": "x" * 4097})  # longer than one request's input
    await settle()
    errors = [m["message"] for m in rig.socket.sent if isinstance(m, dict) and m["type"] == "error"]
    queued = "The session already has 2 sentences waiting to be spoken; wait for the reply to play, or send input.cancel"
    too_long = "A sentence would exceed 4096 characters, the most one speech request takes; split the text"
    assert errors == [queued, queued, too_long]
    assert rig.pipeline.queued_sentences == 2 and len(rig.transport.opened) == 1
    rig.socket.client_sends({"type": "session.close"})
    assert await run is SessionEnd.CLOSED


async def test_session_config_fields_have_the_http_requests_length_caps(tmp_path: Path) -> None:
    for field, cap in (("instructions", 4096), ("ref_text", 4096), ("language", 64), ("voice", 256)):
        rig = Rig(tmp_path)
        run = asyncio.create_task(rig.run())
        rig.socket.client_sends({**CONFIG, field: "x" * (cap + 1)})
        assert await within(5, run) is SessionEnd.REFUSED
        assert rig.socket.sent == [{"type": "error", "message": f"Invalid session config: {field} must be at most {cap} characters"}]
        await rig.pipeline.close()
