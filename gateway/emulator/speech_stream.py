"""WebSocket ``/v1/audio/speech/stream`` of the emulated worker, as vllm-omni 0.30.0 serves it.

Text comes in pieces (``input.text``), is cut into units by the worker's splitter and each
unit is synthesized as its own speech request on the same engine the HTTP endpoint uses,
so a sentence costs what a request costs. Like the released handler
(``serving_speech_stream.py``), the session is one loop:

- units are synthesized inside the receive loop, strictly one after another, and nothing
  is read from the socket meanwhile (the 30 s idle timer does not run during synthesis);
- a unit that fails sends ``error`` then ``audio.done`` with ``error: true`` and the
  session goes on; a bad message ends the session with an ``error`` and no close frame
  (the client sees 1006), only ``session.close`` closes with 1000;
- a client that leaves is noticed at the next send or receive; mid-unit, only a streamed
  unit (``stream_audio``) is aborted in the engine, a whole-file unit runs to its end.

Sessions and their units are not counted by ``GET /load``: the released route has no
``load_aware_call``. Every unit is recorded in the worker metrics as an HTTP request is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import aclosing
from dataclasses import dataclass

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from gateway.emulator.errors import WorkerError
from gateway.emulator.faults import GenerationFailed, StreamCut
from gateway.emulator.metrics import ABORT_CLOSED, FAILED_CLIENT_DISCONNECT, FAILED_STAGE_ERROR
from gateway.emulator.protocol import SpeechJob, SpeechRequest, validate_speech
from gateway.emulator.speech import Generation, SpeechService, _Outcome
from gateway.worker.session_protocol import (
    StreamingSpeechSessionConfig,
    model_not_found,
    sentence_request,
    unknown_voice,
)
from gateway.worker.sentences import SentenceSplitter

log = logging.getLogger("gateway.emulator.speech_stream")

CONFIG_TIMEOUT = 10.0  # seconds for the first session.config (SSS:76)
IDLE_TIMEOUT = 30.0  # seconds between messages afterwards (SSS:75)
STREAM_SAMPLE_RATE = 24000  # advertised in audio.start whatever the model's rate (SSS:77)
MAX_MESSAGE_CHARS = 4 * 1024 * 1024  # any message, counted in characters (SSS:79)
MAX_TEXT_MESSAGE_CHARS = 128 * 1024  # any message but session.config (SSS:80)

NO_FORCED_ALIGNER = (
    "word_timestamps=true but the server was launched without --forced-aligner; either restart the server "
    "with that flag or set word_timestamps=false in session.config."
)
CONFIG_DURING_UTTERANCE = "session.config cannot be applied while an utterance is in progress; send input.done first"


@dataclass(frozen=True)
class StreamTimeouts:
    """The session's timers; fixed on a real worker, shorter only in tests."""

    config: float = CONFIG_TIMEOUT
    idle: float = IDLE_TIMEOUT


class _MessageRefused(Exception):
    """A client message the session answered with an error and will not act on."""


class SpeechStreamHandler:
    """Serves sessions on one emulated worker; ``handle`` runs one connection."""

    def __init__(self, speech: SpeechService, timeouts: StreamTimeouts | None = None) -> None:
        self._speech = speech
        self._timeouts = timeouts or StreamTimeouts()

    async def handle(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            await self._serve(websocket)
        except WebSocketDisconnect:
            log.info("streaming speech: client disconnected")
        except StreamCut:
            log.info("streaming speech: connection cut by an injected fault")
        except Exception as exc:  # the released handler's catch-all: report, end without a close frame
            log.info("streaming speech session error: %s", exc)
            await _send_error(websocket, f"Internal error: {exc}")

    async def _serve(self, websocket: WebSocket) -> None:
        config: StreamingSpeechSessionConfig | None = None
        splitter = SentenceSplitter("none")
        utterance_index = 0
        sentence_index = 0
        # Open from the first non-empty input.text to input.done; the buffer alone cannot
        # tell, since splitting may have emptied it.
        utterance_open = False
        while True:
            timeout = self._timeouts.config if config is None else self._timeouts.idle
            try:
                async with asyncio.timeout(timeout):
                    raw = await websocket.receive_text()
            except TimeoutError:
                expired = "Timeout waiting for session.config" if config is None else "Idle timeout: no message received"
                await _send_error(websocket, expired)
                return
            try:
                message = await _parse(websocket, raw)
            except _MessageRefused:
                if config is None:
                    return
                continue
            kind = message.get("type")
            if kind == "session.config":
                if utterance_open:
                    await _send_error(websocket, CONFIG_DURING_UTTERANCE)
                    continue
                try:
                    config = await self._config(websocket, message)
                except _MessageRefused:
                    if config is None:
                        return
                    continue  # the previous config stays
                splitter = SentenceSplitter(config.split_granularity)
            elif config is None:
                await _send_error(websocket, f"Expected session.config, got: {kind}")
                return
            elif kind == "input.text":
                text = message.get("text", "")
                if not isinstance(text, str):
                    await _send_error(websocket, "input.text requires a string value")
                    continue
                if text:
                    utterance_open = True
                for unit in splitter.feed(text):
                    await self._synthesize(websocket, config, unit, utterance_index, sentence_index)
                    sentence_index += 1
            elif kind == "input.done":
                for unit in splitter.flush():
                    await self._synthesize(websocket, config, unit, utterance_index, sentence_index)
                    sentence_index += 1
                await websocket.send_json(
                    {"type": "session.done", "utterance_index": utterance_index, "total_sentences": sentence_index}
                )
                utterance_index += 1
                sentence_index = 0
                utterance_open = False
            elif kind == "session.close":
                await websocket.close()  # 1000, empty reason; unflushed text is dropped
                return
            else:
                await _send_error(websocket, f"Unknown message type: {kind}")

    async def _config(self, websocket: WebSocket, message: dict[str, object]) -> StreamingSpeechSessionConfig:
        try:
            config = StreamingSpeechSessionConfig(**{key: value for key, value in message.items() if key != "type"})  # type: ignore[arg-type]
        except ValidationError as exc:
            await _send_error(websocket, f"Invalid session config: {exc}")
            raise _MessageRefused from None
        if config.model and config.model not in self._speech.served_names:
            await _send_error(websocket, model_not_found(config.model))
            raise _MessageRefused
        return config

    async def _synthesize(
        self, websocket: WebSocket, config: StreamingSpeechSessionConfig, text: str, utterance_index: int, sentence_index: int
    ) -> None:
        """One unit: ``audio.start``, its audio, ``audio.done`` (SSS:274–421)."""
        started = time.monotonic()
        if config.word_timestamps:
            # Checked before audio.start: the unit sends only the error, yet counts (SSS:293–309).
            # An emulated worker has no forced-aligner stage, as one launched without the flag.
            await _send_error(websocket, NO_FORCED_ALIGNER)
            return
        # Outside the unit's try: a config the request refuses ends the session (SSS:311–330).
        sentence_request(config, text)
        start: dict[str, object] = {
            "type": "audio.start",
            "utterance_index": utterance_index,
            "sentence_index": sentence_index,
            "sentence_text": text,
            "format": config.response_format,
        }
        if config.stream_audio:
            start["sample_rate"] = STREAM_SAMPLE_RATE
        await websocket.send_json(start)

        progress = _Progress()
        failed = False
        try:
            generation = await self._generation(config, text, started)
            if config.stream_audio:
                await self._stream(websocket, generation, progress)
            else:
                await self._whole_file(websocket, generation, progress)
        except StreamCut:
            raise  # a crashing worker sends nothing more
        except WebSocketDisconnect:
            await _send_done(websocket, utterance_index, sentence_index, progress.total_bytes, failed)  # fails quietly
            raise
        except Exception as exc:
            failed = True
            log.info("generation failed for utterance %d, sentence %d: %s", utterance_index, sentence_index, exc)
            await _send_error(
                websocket,
                f"Generation failed for utterance {utterance_index}, sentence {sentence_index}: {exc}",
                partial_audio=progress.total_bytes > 0,
            )
        await _send_done(websocket, utterance_index, sentence_index, progress.total_bytes, failed)

    async def _generation(self, config: StreamingSpeechSessionConfig, text: str, started: float) -> Generation:
        """The unit's engine request, or the reason the worker refuses it."""
        speech = self._speech
        # The Higgs adapter checks the voice only without ref_audio, and over WebSocket
        # `default` is a name like any other (SS:749–781, SS:2526–2528).
        voice = config.voice if config.ref_audio is None else None
        if voice is not None and voice.lower() not in speech.voice_names():
            raise ValueError(unknown_voice(voice))
        job = _job(config, text, voice, speech)
        # Resolved, cached and encoded as for the HTTP endpoint (the same prompt builder).
        reference = await speech.reference_for(job)
        await speech._hang_if_asked()
        if speech.faults.take_failure():
            speech.metrics.failed_request(FAILED_STAGE_ERROR)
            raise GenerationFailed("injected fault")
        return Generation(job, speech.model, speech.driver, speech.audio, speech.default_seed, started, reference, speech.faults)

    async def _stream(self, websocket: WebSocket, generation: Generation, progress: _Progress) -> None:
        """Headerless PCM frames as the engine makes them (SSS:370–381)."""
        speech = self._speech
        outcome = _Outcome()
        try:
            async with aclosing(speech._audio(generation, outcome)) as chunks:
                async for pcm, _ in chunks:
                    progress.total_bytes += len(pcm)
                    await websocket.send_bytes(pcm)
        except WebSocketDisconnect:
            # The failed send closes the chunk generator, then the handler aborts the
            # request (SSS:389–395): a closed stream and a client_disconnect failure.
            outcome.abort_reason = ABORT_CLOSED
            speech.metrics.failed_request(FAILED_CLIENT_DISCONNECT)
            raise
        finally:
            generation.close()  # frees the batch slot at once if the unit did not finish
            if not outcome.completed:
                speech.metrics.aborted_stream(outcome.abort_reason)

    async def _whole_file(self, websocket: WebSocket, generation: Generation, progress: _Progress) -> None:
        """One binary frame holding the whole file, a WAV header per unit (SSS:382–388)."""
        speech = self._speech
        if speech.faults.cut_after_chunks is not None:
            generation.close()
            speech.metrics.failed_request(FAILED_STAGE_ERROR)
            raise StreamCut("injected fault: connection cut")
        try:
            response = await speech._whole_file(generation)
        except GenerationFailed:
            speech.metrics.failed_request(FAILED_STAGE_ERROR)
            raise
        finally:
            generation.close()
        body = bytes(response.body)
        progress.total_bytes = len(body)
        # Generated to its end before the send: a client that left is noticed only here.
        await websocket.send_bytes(body)


@dataclass
class _Progress:
    total_bytes: int = 0  # audio bytes sent so far for the unit


def _job(config: StreamingSpeechSessionConfig, text: str, voice: str | None, speech: SpeechService) -> SpeechJob:
    """The unit as the HTTP endpoint would take it, so it costs what a request costs."""
    request = SpeechRequest(
        input=text,
        voice=voice,
        response_format=config.response_format,
        stream_format="audio" if config.stream_audio else None,
        speed=config.speed,
        ref_audio=config.ref_audio,
        ref_text=config.ref_text,
        seed=config.seed,
        max_new_tokens=config.max_new_tokens,
        language=config.language,
        instructions=config.instructions,
        task_type=config.task_type,
    )
    try:
        return validate_speech(request, speech.served_names, speech.voice_names())
    except WorkerError as exc:
        raise ValueError(exc.message) from None


async def _parse(websocket: WebSocket, raw: str) -> dict[str, object]:
    """Decode one client message or answer why not (SSS:228–256); sizes count characters."""
    if len(raw) > MAX_MESSAGE_CHARS:
        await _send_error(websocket, "WebSocket message too large")
        raise _MessageRefused
    try:
        message = json.loads(raw)
    except json.JSONDecodeError:
        await _send_error(websocket, "Invalid JSON message")
        raise _MessageRefused from None
    if not isinstance(message, dict):
        await _send_error(websocket, "WebSocket messages must be JSON objects")
        raise _MessageRefused
    # A session.config over the larger limit was refused above already.
    if message.get("type") != "session.config" and len(raw) > MAX_TEXT_MESSAGE_CHARS:
        await _send_error(websocket, "input.text message too large")
        raise _MessageRefused
    return message


async def _send_error(websocket: WebSocket, message: str, *, partial_audio: bool = False) -> None:
    payload: dict[str, object] = {"type": "error", "message": message}
    if partial_audio:
        payload.update(partial_audio=True, action="discard")
    try:
        await websocket.send_json(payload)
    except Exception:  # the connection may be gone already
        pass


async def _send_done(websocket: WebSocket, utterance_index: int, sentence_index: int, total_bytes: int, failed: bool) -> None:
    """``audio.done`` ends every unit that sent ``audio.start``, failed or not (SSS:409–421)."""
    try:
        await websocket.send_json(
            {
                "type": "audio.done",
                "utterance_index": utterance_index,
                "sentence_index": sentence_index,
                "total_bytes": total_bytes,
                "error": failed,
            }
        )
    except Exception:
        log.debug("could not send audio.done for sentence %d", sentence_index)
