"""A Pipecat TTS service over the gateway's voice sessions (``pip install higgs-gateway[pipecat]``).

One WebSocket to ``/v1/audio/speech/stream`` per pipeline, opened when the pipeline
starts and kept alive with an empty ``input.text`` every few seconds (the gateway ends a
session idle for ``sessions.idle_timeout_s``). Each Pipecat turn (audio context) is one
utterance of the session: its text goes in as ``input.text``, the end of the turn is
``input.done``, and the audio of every sentence comes back on the same socket while the
gateway pipelines the next. An interruption sends ``input.cancel`` and the cancelled
utterance's audio, whatever of it is still on the wire, is dropped here: no reconnect. So
is the interrupted reply's text that reaches the service after the interruption.

Text goes out as Pipecat aggregates it: sentences by default. ``text_aggregation_mode=
TextAggregationMode.TOKEN`` works too (the gateway cuts the sentences itself, with the
worker's rules): at an LLM's pace it was a little earlier (``bench integrations``), but
Pipecat then runs its whole per-text path for every token, and at four times that pace
on a busy machine it fell seconds behind; sentences cost the same whatever the pace.

Which utterance a frame belongs to follows the gateway's numbering (0, 1, ... : one more
after every ``input.done``, and after a cancel of an utterance still taking text), which
this service mirrors, so every ``audio.start`` maps back to its turn.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from pipecat.frames.frames import (
    Frame,
    InterruptionFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import WebsocketTTSService
from websockets.protocol import State

from gateway.integrations.session_client import AGENT_CONFIG, KEEPALIVE, KEEPALIVE_S, SAMPLE_RATE, stream_url


class HiggsSessionTTSService(WebsocketTTSService):
    """Text frames in, the gateway's session audio out; barge-in by ``input.cancel``."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        voice: str = "default",
        model: str | None = None,
        session_config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """``base_url``: the gateway (``http://host:8000``); ``session_config``: any other
        ``session.config`` field (``seed``, ``ref_audio``, ``language``, ...)."""
        super().__init__(
            push_stop_frames=True,
            push_start_frame=True,
            sample_rate=SAMPLE_RATE,
            settings=TTSSettings(model=model or "higgs-audio-v3", voice=voice, language=None),
            **kwargs,
        )
        self._url = stream_url(base_url)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        config: dict[str, Any] = {**AGENT_CONFIG, "voice": voice, **(session_config or {})}
        if model is not None:
            config["model"] = model
        self._config = config
        self._receive_task: Any = None
        self._utterance = 0  # the index the gateway gives the utterance taking text now
        self._open_context: str | None = None  # the turn whose text the open utterance takes
        self._contexts: dict[int, str] = {}  # utterance index -> turn, until its session.done
        self._playing: int | None = None  # the utterance of the sentence whose PCM is arriving
        self._interrupted = False  # since an interruption, until the next reply starts
        self.connects = 0  # sockets opened: 1 for a pipeline whose socket never broke

    def can_generate_metrics(self) -> bool:
        return True

    # ---- connection ---------------------------------------------------------------------

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self._connect()

    async def _connect(self) -> None:
        await super()._connect()
        await self._connect_websocket()
        if self._websocket and not self._receive_task:
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))
        self._create_keepalive_task(KEEPALIVE_S)

    async def _disconnect(self) -> None:
        await super()._disconnect()
        await self._cancel_keepalive_task()
        if self._receive_task:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        if self._websocket and self._websocket.state is State.OPEN:
            return
        self._websocket = await self._websocket_connect(self._url, additional_headers=self._headers, max_size=None)
        await self._websocket.send(json.dumps({"type": "session.config", **self._config}))
        # A new socket is a new session: its utterances count from 0 again.
        self._utterance, self._open_context, self._contexts, self._playing = 0, None, {}, None
        self.connects += 1
        await self._call_event_handler("on_connected")

    async def _disconnect_websocket(self) -> None:
        try:
            await self.stop_all_metrics()
            if self._websocket:
                await self._websocket.send(json.dumps({"type": "session.close"}))
                await self._websocket.close()
        except Exception:  # noqa: BLE001 -- closing anyway
            pass
        finally:
            self._websocket = None
            await self._call_event_handler("on_disconnected")

    async def _send_keepalive(self) -> None:
        if self._websocket and self._websocket.state is State.OPEN:
            await self._websocket.send(KEEPALIVE)

    # ---- text in ------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, InterruptionFrame):
            self._interrupted = True  # first: handling it lets queued frames run
        elif isinstance(frame, LLMFullResponseStartFrame):
            self._interrupted = False
        elif isinstance(frame, LLMTextFrame) and self._interrupted:
            # The interrupted reply's tokens that were still in this processor's queue: an
            # InterruptionFrame (a system frame) overtakes them there, so they come after it,
            # and would be spoken as a new turn.
            return
        await super().process_frame(frame, direction)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        if self._websocket is None or self._websocket.state is not State.OPEN:
            await self._connect()
        if self._open_context != context_id:
            if self._open_context is not None:
                await self._end_utterance()  # a turn that was never flushed ends here
            self._open_context = context_id
            self._contexts[self._utterance] = context_id
        await self.start_tts_usage_metrics(text)
        if not self._is_streaming_tokens and not text.endswith((" ", "\n")):
            text += " "  # aggregated sentences come without the space between them
        await self._send({"type": "input.text", "text": text})
        yield None  # the audio comes on the receive task

    async def flush_audio(self, context_id: str | None = None) -> None:
        if self._open_context is not None and context_id in (None, self._open_context):
            await self._end_utterance()

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        await self.stop_all_metrics()
        index = next((i for i, ctx in self._contexts.items() if ctx == context_id), None)
        if index is not None:
            # One cancel stops every utterance of the session still running; the others'
            # hooks find nothing left to cancel.
            await self._send({"type": "input.cancel"})
            if self._open_context is not None:
                self._utterance += 1  # the gateway closes the utterance that was taking text
                self._open_context = None
            self._contexts.clear()
        await super().on_audio_context_interrupted(context_id)

    async def _end_utterance(self) -> None:
        await self._send({"type": "input.done"})
        self._utterance += 1
        self._open_context = None

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._websocket is not None
        await self._websocket.send(json.dumps(message))

    # ---- audio out ----------------------------------------------------------------------

    async def _receive_messages(self) -> None:
        assert self._websocket is not None
        async for frame in self._websocket:
            if isinstance(frame, bytes):
                context_id = self._contexts.get(self._playing) if self._playing is not None else None
                if context_id and self.audio_context_available(context_id):
                    await self.stop_ttfb_metrics()
                    audio = TTSAudioRawFrame(frame, self.sample_rate, 1, context_id=context_id)
                    await self.append_to_audio_context(context_id, audio)
                continue  # a cancelled utterance's audio still on the wire: dropped
            message: dict[str, Any] = json.loads(frame)
            kind = message.get("type")
            if kind == "audio.start":
                self._playing = int(message["utterance_index"])
            elif kind == "session.done":
                context_id = self._contexts.pop(int(message["utterance_index"]), None)
                if context_id and self.audio_context_available(context_id):
                    await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
                    await self.remove_audio_context(context_id)
            elif kind == "error" and "Generation failed" not in str(message.get("message", "")):
                await self.push_error(error_msg=f"Voice session error: {message.get('message')}")
