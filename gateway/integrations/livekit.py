"""A LiveKit Agents TTS over the gateway's voice sessions (``pip install higgs-gateway[livekit]``).

``TTS`` streams (``capabilities.streaming``): ``AgentSession`` pushes the LLM's tokens as
they come and the gateway cuts, routes and pipelines the sentences, so the first audio
leaves after the first sentence, not the whole reply. All the agent's replies share one
WebSocket (``gateway.integrations.session_client``). An interruption closes the stream;
the reply is then cancelled upstream with ``input.cancel`` and its remaining audio
dropped, on the same socket.

Word timing is an estimate: the sessions stream no word timestamps (a Higgs worker has no
forced aligner), so each sentence's words are spread over its audio by their share of its
characters, once the sentence's length is known (``audio.done``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from livekit.agents import APIConnectOptions, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, TimedString

from gateway.integrations.session_client import SAMPLE_RATE, SentenceDone, SentenceStart, SpeechSession, Utterance

BYTES_PER_SECOND = SAMPLE_RATE * 2


def estimated_words(text: str, start_s: float, duration_s: float) -> list[TimedString]:
    """``text``'s words spread over ``duration_s`` from ``start_s`` by their share of its characters."""
    words = text.split()
    total = sum(len(word) for word in words) or 1
    timed: list[TimedString] = []
    at = start_s
    for word in words:
        length = duration_s * len(word) / total
        timed.append(TimedString(word + " ", start_time=at, end_time=at + length))
        at += length
    return timed


class TTS(tts.TTS):
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        voice: str = "default",
        **session_config: Any,
    ) -> None:
        """``base_url``: the gateway (``http://host:8000``); ``session_config``: any other
        ``session.config`` field (``seed``, ``ref_audio``, ``language``, ...)."""
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
            sample_rate=SAMPLE_RATE,
            num_channels=1,
        )
        config = {"voice": voice, **session_config}
        if model is not None:
            config["model"] = model
        self._model = model or "higgs-audio-v3"
        self._session = SpeechSession(base_url, config, api_key=api_key)

    @property
    def model(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return "higgs-gateway"

    @property
    def session(self) -> SpeechSession:
        return self._session

    def synthesize(self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> ChunkedStream:
        return ChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> SynthesizeStream:
        return SynthesizeStream(tts=self, conn_options=conn_options)

    async def aclose(self) -> None:
        await self._session.aclose()


async def _play(utterance: Utterance, emitter: tts.AudioEmitter) -> None:
    """Push the reply's PCM and the estimated word timing until ``session.done``."""
    played_s = 0.0
    text = ""
    async for event in utterance.events():
        if isinstance(event, bytes):
            emitter.push(event)
        elif isinstance(event, SentenceStart):
            text = event.text
        elif isinstance(event, SentenceDone):
            duration_s = event.total_bytes / BYTES_PER_SECOND
            if text.strip():
                emitter.push_timed_transcript(estimated_words(text, played_s, duration_s))
            played_s += duration_s


class ChunkedStream(tts.ChunkedStream):
    def __init__(self, *, tts: TTS, input_text: str, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._session = tts.session

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(
            request_id=utils.shortuuid(), sample_rate=SAMPLE_RATE, num_channels=1, mime_type="audio/pcm"
        )
        async with self._session.utterance() as utterance:
            await utterance.send_text(self.input_text)
            await utterance.done()
            await _play(utterance, output_emitter)
        output_emitter.flush()


class SynthesizeStream(tts.SynthesizeStream):
    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._session = tts.session

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(
            request_id=utils.shortuuid(), sample_rate=SAMPLE_RATE, num_channels=1, mime_type="audio/pcm", stream=True
        )
        first = await self._first_text()
        if first is None:
            return  # nothing to say: no utterance at all
        output_emitter.start_segment(segment_id=utils.shortuuid())
        async with self._session.utterance() as utterance:
            self._mark_started()
            await utterance.send_text(first)
            sender = asyncio.create_task(self._send_rest(utterance))
            try:
                await _play(utterance, output_emitter)
            finally:
                await utils.aio.cancel_and_wait(sender)
        output_emitter.end_segment()

    async def _first_text(self) -> str | None:
        async for data in self._input_ch:
            if isinstance(data, str):
                if data:
                    return data
            else:
                return None  # a flush before any text
        return None

    async def _send_rest(self, utterance: Utterance) -> None:
        # One segment per stream (LiveKit's model): the first flush or the end of input ends it.
        async for data in self._input_ch:
            if isinstance(data, str):
                await utterance.send_text(data)
            else:
                break
        await utterance.done()
