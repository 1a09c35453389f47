"""One voice-agent session over ``/v1/audio/speech/stream``, timed as a listener hears it.

The client streams each reply at an LLM's pace (``text_stream``), flushes it with
``input.done`` and reads everything the server sends meanwhile, timing every audio frame.
Times are wall clock here; the caller converts them to modelled seconds.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from gateway.bench.text_stream import Reply, first_sentence_complete_s, schedule
from gateway.config import DEFAULT_MODEL

STREAM_PATH = "/v1/audio/speech/stream"
# What a voice agent asks for: raw PCM as it is made, cut at sentences.
VOICE_AGENT_CONFIG = {"response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}


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
