"""One voice-agent session over ``/v1/audio/speech/stream``, sent as an LLM sends and heard as a listener hears.

Sending: an LLM emits tokens at a steady rate (30 tokens/s by default, the rate LiveKit's
own TTS tests use); a token is about four characters of English. A reply is cut into pieces
of ``chars_per_token`` characters, piece ``i`` sent ``i / tokens_per_second`` seconds after
the reply started. The first sentence's text is complete when the piece holding its last
character has been sent: time to first audio counts from there. Each reply is flushed with
``input.done`` while everything the server sends meanwhile is read, every audio frame timed.

Hearing: a simulated real-time player. Audio (24 kHz s16le mono) starts playing the moment
its first byte arrives and then plays at exactly real time. A gap is any stretch, after that
start and before the utterance's last byte has played, in which the player has nothing
left to play: a chunk that arrives after everything before it has already been heard.

Times are wall clock in the client; the caller converts them to modelled seconds (the
player works in whichever unit it is given).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from gateway.config import DEFAULT_MODEL
from gateway.types.codec import BYTES_PER_SECOND  # 24 kHz s16le mono, as a session streams it

STREAM_PATH = "/v1/audio/speech/stream"
# What a voice agent asks for: raw PCM as it is made, cut at sentences.
VOICE_AGENT_CONFIG = {"response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}
DEFAULT_TOKENS_PER_SECOND = 30.0
CHARS_PER_TOKEN = 4
_EPSILON_S = 1e-6  # float noise from summing chunk durations, far below one sample (42 us)


def stream_url(base: str) -> str:
    return base.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1) + STREAM_PATH


@dataclass(frozen=True, slots=True)
class SessionOptions:
    url: str  # the HTTP base URL of a gateway or a worker
    tokens_per_second: float
    time_scale: float
    voice: str = "default"
    model: str = DEFAULT_MODEL
    timeout_s: float = 120.0  # per utterance, wall clock


@dataclass
class Utterance:
    """What one reply looked like from the client (wall-clock seconds from its first piece)."""

    first_sentence_complete: float
    chunks: list[tuple[float, int, int]] = field(default_factory=list)  # (at, bytes, sentence index)
    sentences: int = 0
    errors: list[str] = field(default_factory=list)
    pools: list[str] = field(default_factory=list)


async def _send_pieces(ws: ClientConnection, reply: Reply, options: SessionOptions, started: float) -> float:
    """Stream the reply at the LLM's rate, then flush; returns when its first sentence was complete."""
    pieces = schedule(reply.text, options.tokens_per_second)
    for piece in pieces:
        delay = started + piece.at_s * options.time_scale - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await ws.send(json.dumps({"type": "input.text", "text": piece.text}))
    await ws.send(json.dumps({"type": "input.done"}))
    return first_sentence_complete_s(reply, pieces) * options.time_scale


async def speak(ws: ClientConnection, reply: Reply, options: SessionOptions) -> Utterance:
    """One reply, streamed and flushed; returns once the server sent ``session.done``."""
    started = time.perf_counter()
    utterance = Utterance(first_sentence_complete=0.0)
    sender = asyncio.create_task(_send_pieces(ws, reply, options, started))
    sentence = -1
    try:
        async with asyncio.timeout(options.timeout_s):
            async for frame in ws:
                at = time.perf_counter() - started
                if isinstance(frame, bytes):
                    utterance.chunks.append((at, len(frame), sentence))
                    continue
                message: dict[str, Any] = json.loads(frame)
                kind = message.get("type")
                if kind == "audio.start":
                    sentence = int(message.get("sentence_index", sentence + 1))
                    utterance.sentences += 1
                    pool = (message.get("gateway") or {}).get("pool")
                    if pool:
                        utterance.pools.append(pool)
                elif kind == "error":
                    utterance.errors.append(str(message.get("message", "")))
                elif kind == "session.done":
                    break
        utterance.first_sentence_complete = await sender
    finally:
        sender.cancel()
    return utterance


async def open_session(options: SessionOptions, gateway: bool) -> ClientConnection:
    ws = await connect(stream_url(options.url), max_size=None, open_timeout=options.timeout_s)
    config: dict[str, Any] = {"type": "session.config", "model": options.model, **VOICE_AGENT_CONFIG}
    config.update(voice_field(options.voice))
    if gateway:
        config["gateway_debug"] = True  # each sentence's pool in audio.start (a worker ignores it)
    await ws.send(json.dumps(config))
    return ws


def voice_field(voice: str) -> dict[str, str]:
    """The model's own voice is no field at all: a worker knows no voice named "default"
    (the gateway maps that name to leaving the field out), so both get the same request."""
    return {} if voice.strip().lower() == "default" else {"voice": voice}


@dataclass
class BargeIn:
    """Wall-clock seconds from sending ``input.cancel``."""

    last_byte_s: float  # the last audio byte of the utterance (0 if none came after the cancel)
    slot_freed_s: float | None  # every worker's /load back to 0 (None: not within the timeout)
    bytes_after_cancel: int
    total_bytes_reported: int | None


async def _workers_idle_after(workers: list[str], started: float, timeout_s: float) -> float | None:
    async with httpx.AsyncClient(timeout=5.0) as client:
        deadline = started + timeout_s
        while time.perf_counter() < deadline:
            loads = await asyncio.gather(*(client.get(f"{url}/load") for url in workers))
            if all(int(r.json()["server_load"]) == 0 for r in loads):
                return time.perf_counter() - started
            await asyncio.sleep(0.002)
    return None


async def barge_in(options: SessionOptions, reply: Reply, workers: list[str], after_audio_s: float) -> BargeIn:
    """One reply sent whole and flushed; ``after_audio_s`` (modelled) after its first audio,
    the listener interrupts. Measures the audio that still came and when the workers were free."""
    ws = await open_session(options, gateway=True)
    try:
        await ws.send(json.dumps({"type": "input.text", "text": reply.text}))
        await ws.send(json.dumps({"type": "input.done"}))
        first_audio: float | None = None
        async with asyncio.timeout(options.timeout_s):
            while True:
                frame = await ws.recv()
                if isinstance(frame, bytes) and frame:
                    first_audio = first_audio or time.perf_counter()
                    if time.perf_counter() - first_audio >= after_audio_s * options.time_scale:
                        break
                elif isinstance(frame, str) and json.loads(frame).get("type") == "session.done":
                    break  # the reply ended first: the cancel then has nothing to stop, and says so
            cancelled = time.perf_counter()
            await ws.send(json.dumps({"type": "input.cancel"}))
            idle = asyncio.create_task(_workers_idle_after(workers, cancelled, options.timeout_s))
            last_byte, after, reported = 0.0, 0, None
            while True:
                frame = await ws.recv()
                if isinstance(frame, bytes):
                    last_byte, after = time.perf_counter() - cancelled, after + len(frame)
                    continue
                message = json.loads(frame)
                if message.get("type") == "input.cancelled":
                    reported = message.get("total_bytes")
                    break
            freed = await idle
        return BargeIn(last_byte, freed, after, reported)
    finally:
        await ws.close()


# ---- sending: a reply at an LLM's pace ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Piece:
    at_s: float  # after the reply started
    text: str


@dataclass(frozen=True, slots=True)
class Reply:
    sentences: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def schedule(text: str, tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND,
             chars_per_token: int = CHARS_PER_TOKEN) -> list[Piece]:  # fmt: skip
    """The reply as an LLM would stream it."""
    if tokens_per_second <= 0 or chars_per_token <= 0:
        raise ValueError("tokens_per_second and chars_per_token must be positive")
    return [
        Piece(index / tokens_per_second, text[start : start + chars_per_token])
        for index, start in enumerate(range(0, len(text), chars_per_token))
    ]


def first_sentence_complete_s(reply: Reply, pieces: Sequence[Piece]) -> float:
    """When the piece holding the first sentence's last character was sent."""
    end = len(reply.sentences[0])  # characters up to and including its last one
    sent = 0
    for piece in pieces:
        sent += len(piece.text)
        if sent >= end:
            return piece.at_s
    raise ValueError("the pieces do not hold the first sentence")


# Voice-agent replies: a short opener (what a listener hears first), then longer sentences.
REPLIES: tuple[Reply, ...] = (
    Reply((
        "Sure, I can help with that.",
        "Your order left our warehouse this morning and is on its way to the address on file.",
        "It should arrive by Thursday afternoon, and you will get a text message when the driver is close.",
        "Is there anything else you would like to know about the delivery?",
    )),
    Reply((
        "Good question.",
        "The museum opens at nine in the morning on weekdays and at ten on weekends and public holidays.",
        "Tickets are cheaper online, and children under twelve get in for free with an adult.",
        "Would you like me to book two tickets for Saturday?",
    )),
    Reply((
        "Let me check.",
        "The next train to the airport leaves from platform four in about twelve minutes.",
        "The ride takes forty minutes, so you would arrive with plenty of time before your flight.",
        "Shall I send the timetable to your phone?",
    )),
)  # fmt: skip


def replies(count: int, offset: int = 0) -> list[Reply]:
    """``count`` replies, cycling through the set from ``offset``."""
    return [REPLIES[(offset + index) % len(REPLIES)] for index in range(count)]


# ---- hearing: a real-time player ------------------------------------------------------------
@dataclass
class Player:
    """Feed it chunks in arrival order; it keeps the gaps a listener sits through."""

    bytes_per_second: float = BYTES_PER_SECOND
    started_at: float | None = None
    played_until: float = 0.0  # the moment the audio received so far has all been played
    total_bytes: int = 0
    gaps: list[float] = field(default_factory=list)  # one entry per silence, in seconds
    gap_starts: list[float] = field(default_factory=list)

    def add(self, at: float, size: int) -> float:
        """A chunk of ``size`` bytes arrived at ``at``; returns the silence it ended (0 if none)."""
        if size <= 0:
            return 0.0
        gap = 0.0
        if self.started_at is None:
            self.started_at = at
            self.played_until = at
        elif at > self.played_until + _EPSILON_S:
            gap = at - self.played_until
            self.gaps.append(gap)
            self.gap_starts.append(self.played_until)
            self.played_until = at
        self.played_until += size / self.bytes_per_second
        self.total_bytes += size
        return gap

    @property
    def audio_s(self) -> float:
        return self.total_bytes / self.bytes_per_second


def gaps_of(chunks: list[tuple[float, int]], bytes_per_second: float = BYTES_PER_SECOND) -> list[float]:
    """Every silence a player suffers on ``(arrival time, bytes)`` chunks, in arrival order."""
    player = Player(bytes_per_second)
    for at, size in chunks:
        player.add(at, size)
    return player.gaps
