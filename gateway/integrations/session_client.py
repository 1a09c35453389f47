"""A client of the gateway's voice sessions (``/v1/audio/speech/stream``) for voice-agent frameworks.

One WebSocket per agent, kept open (WebSocket pings keep it alive through proxies) and
used by one utterance at a time. An utterance streams text in, gets 24 kHz PCM out
sentence by sentence, and ends with ``session.done``; one that is left before that (the
user barged in) sends ``input.cancel`` and reads up to the gateway's ``input.cancelled``,
dropping the rest of its audio, so the next utterance starts on the same socket with
nothing stale in front of it. The socket is only reopened if it died.

Needs ``websockets`` only; the framework adapters (``gateway.integrations.livekit``) sit on it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

STREAM_PATH = "/v1/audio/speech/stream"
SAMPLE_RATE = 24_000  # the sessions' streamed PCM: 24 kHz, mono, s16le
# The gateway ends a session silent for sessions.idle_timeout_s (30 s); WebSocket pings do
# not count, so an idle agent says an empty input.text now and then (it opens no utterance).
KEEPALIVE_S = 10.0
KEEPALIVE = json.dumps({"type": "input.text", "text": ""})
# What a voice agent wants: raw PCM as it is made, cut at sentences.
AGENT_CONFIG: Mapping[str, Any] = {"response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}


class SessionError(RuntimeError):
    """The gateway refused the session or a message (its ``error`` text)."""


@dataclass(frozen=True, slots=True)
class SentenceStart:
    """``audio.start``: the sentence whose PCM follows."""

    utterance: int
    sentence: int
    text: str


@dataclass(frozen=True, slots=True)
class SentenceDone:
    """``audio.done``: the sentence's PCM is complete (``total_bytes`` of it)."""

    utterance: int
    sentence: int
    total_bytes: int
    failed: bool


Event = SentenceStart | SentenceDone | bytes


def stream_url(base_url: str) -> str:
    """``ws(s)://host/v1/audio/speech/stream`` from the gateway's HTTP base URL (a trailing ``/v1`` is fine)."""
    base = base_url.rstrip("/")
    base = base.removesuffix("/v1")
    return base.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + STREAM_PATH


class SpeechSession:
    """The agent's one socket to the gateway; ``utterance()`` lends it to one reply at a time."""

    def __init__(
        self,
        base_url: str,
        config: Mapping[str, Any],
        *,
        api_key: str | None = None,
        ping_interval_s: float = 20.0,
        open_timeout_s: float = 10.0,
    ) -> None:
        self._url = stream_url(base_url)
        self._config = {**AGENT_CONFIG, **config}
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._ping_interval_s = ping_interval_s
        self._open_timeout_s = open_timeout_s
        self._ws: ClientConnection | None = None
        self._lock = asyncio.Lock()
        self._keepalive: asyncio.Task[None] | None = None
        self.connects = 0  # sockets opened so far: 1 for a session that never broke

    @asynccontextmanager
    async def utterance(self) -> AsyncIterator[Utterance]:
        """One reply on the shared socket; leaving it before ``session.done`` cancels it."""
        async with self._lock:
            ws = await self._socket()
            utterance = Utterance(ws)
            try:
                yield utterance
            finally:
                if not utterance.finished:
                    # Shielded: the framework cancels the task that speaks when the user
                    # barges in, and the socket must be left clean for the next reply.
                    try:
                        await asyncio.shield(utterance.cancel())
                    except Exception:  # noqa: BLE001 -- a broken socket is reopened next time
                        await self._drop()

    async def aclose(self) -> None:
        async with self._lock:
            if self._keepalive is not None:
                self._keepalive.cancel()
                self._keepalive = None
            if self._ws is not None:
                try:
                    await self._ws.send(json.dumps({"type": "session.close"}))
                except Exception:  # noqa: BLE001 -- closing anyway
                    pass
            await self._drop()

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_S)
            ws = self._ws
            if ws is not None and ws.close_code is None:
                try:
                    await ws.send(KEEPALIVE)
                except Exception:  # noqa: BLE001 -- the next utterance reopens it
                    pass

    async def _socket(self) -> ClientConnection:
        if self._ws is not None and self._ws.close_code is None:
            return self._ws
        await self._drop()
        ws = await connect(
            self._url,
            additional_headers=self._headers,
            ping_interval=self._ping_interval_s,
            open_timeout=self._open_timeout_s,
            max_size=None,
        )
        await ws.send(json.dumps({"type": "session.config", **self._config}))
        self._ws = ws
        self.connects += 1
        if self._keepalive is None:
            self._keepalive = asyncio.create_task(self._keep_alive())
        return ws

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()


class Utterance:
    """One reply: ``send_text`` any pieces, ``done()`` after the last, read ``events()``."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self.finished = False  # session.done (or input.cancelled) was read
        self.index: int | None = None  # the gateway's utterance_index, once it named it
        self._flushed = False

    async def send_text(self, text: str) -> None:
        if text:
            await self._ws.send(json.dumps({"type": "input.text", "text": text}))

    async def done(self) -> None:
        """``input.done``: no more text; the rest is the reply's last sentence."""
        if not self._flushed:
            self._flushed = True
            await self._ws.send(json.dumps({"type": "input.done"}))

    async def events(self) -> AsyncIterator[Event]:
        """Sentence starts, PCM and sentence ends, in order, up to ``session.done``."""
        async for frame in self._ws:
            if isinstance(frame, bytes):
                yield frame
                continue
            message: dict[str, Any] = json.loads(frame)
            kind = message.get("type")
            if kind == "audio.start":
                self.index = int(message["utterance_index"])
                yield SentenceStart(self.index, int(message["sentence_index"]), str(message.get("sentence_text", "")))
            elif kind == "audio.done":
                yield SentenceDone(
                    int(message["utterance_index"]),
                    int(message["sentence_index"]),
                    int(message.get("total_bytes", 0)),
                    bool(message.get("error", False)),
                )
            elif kind == "session.done":
                self.finished = True
                return
            elif kind == "error" and not message.get("partial_audio"):
                # A sentence's failure comes with audio.done error=true and the reply goes on;
                # anything else (a refused config) ends the reply.
                if "Generation failed" not in str(message.get("message", "")):
                    raise SessionError(str(message.get("message", "session error")))
        raise SessionError("the gateway closed the session")

    async def cancel(self) -> None:
        """Barge-in: ``input.cancel``, then drop everything up to ``input.cancelled``."""
        await self._ws.send(json.dumps({"type": "input.cancel"}))
        async with asyncio.timeout(10):
            async for frame in self._ws:
                if isinstance(frame, str) and json.loads(frame).get("type") == "input.cancelled":
                    self.finished = True
                    return
        raise SessionError("the gateway closed the session during a cancel")
