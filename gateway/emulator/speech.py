"""``POST /v1/audio/speech`` of the emulated worker: raw stream, SSE or whole file.

Streams follow the real chunk pattern (first chunk 1 frame = 1920 bytes, then 25 frames =
48000 bytes, the last one partial) at the times the engine model says. A client that
leaves is noticed at once (Starlette listens for the disconnect while streaming; whole-file
requests watch for it the way vLLM's ``with_cancellation`` does) and its batch slot freed.

A budget that ends before the first audio frame (``max_new_tokens`` below 8) gives what
the released worker gives: one empty chunk, so a 200 with no audio (a raw WAV stream
sends its header with that chunk, as it does with the first audio of any stream).

A prompt of ``max_model_len`` tokens or more fails as on the released worker: vLLM checks
its length when the engine generator first runs (vllm-omni ``entrypoints/async_omni.py``
283-291 -> ``engine/async_omni_engine.py`` 330-352 -> vllm ``v1/engine/input_processor.py``
440-485), which for a stream is after the ``200`` went out (``serving_speech.py`` 2064,
2576-2591). A raw stream is then cut with no byte (1796-1806: re-raised inside the body),
an SSE stream sends ``speech.audio.error`` (1876-1890), a whole-file request answers 500
"Speech generation failed: ..." (``VLLMValidationError`` is no ``ValueError``, so it falls
to the last ``except``, 2720-2733).

An uploaded voice is a voice clone (``serving_speech.py`` 749-804): its clip is the
``ref_audio`` and its ``ref_text`` the reference text unless the request brings one, and it
goes through the reference caches (``gateway.emulator.ref_cache``) like any clip.

Like the real worker, it accepts a caller's ``x-request-id`` and ``traceparent`` and acts on
neither; at ``--log-level debug`` it logs them, to show what a gateway passed on.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.emulator.audio import BYTES_PER_FRAME, SAMPLES_PER_FRAME
from gateway.emulator.driver import EngineDriver
from gateway.emulator.encode import CONTENT_TYPES, encode_whole, streaming_wav_header
from gateway.emulator.engine import ChunkEvent, EngineRequest
from gateway.emulator.engine_death import DEAD_STAGE, EngineDead, EngineLife, engine_dead_body
from gateway.emulator.errors import WorkerError, error_body, error_response, sanitize_message, validation_error
from gateway.emulator.faults import Faults, GenerationFailed, StreamCut
from gateway.emulator.metrics import (
    ABORT_CANCELLED,
    ABORT_ENGINE_DEAD,
    ABORT_ERROR,
    FAILED_CLIENT_DISCONNECT,
    FAILED_STAGE_ERROR,
    EmulatorMetrics,
)
from gateway.emulator.protocol import SpeechJob, parse_speech_request, validate_speech
from gateway.emulator.ref_audio import RefAudioResolver, decoded_clip, probe_audio
from gateway.emulator.ref_cache import ResolvedClip
from gateway.emulator.spoken import SpeechAudio
from gateway.emulator.voices import VoiceStore
from gateway.types.codec import BYTES_PER_SECOND, SAMPLE_RATE
from gateway.worker.timing import StepModel

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
log = logging.getLogger("gateway.emulator.speech")


class LoadCounter:
    """``GET /load``: speech requests in flight, counted from arrival to the last byte.

    vllm ``entrypoints/serve/utils/api_utils.py`` ``load_aware_call`` 100-145 counts a request
    in, and out only when the handler raises an ``Exception`` (120-122) or when its
    response's background task runs (124-139). It leaks in two windows, which the
    ``leak_load`` fault reproduces (off by default: the fleet's replicas work needs it):

    * the client leaves before the handler returns: ``with_cancellation`` cancels the
      handler, and a ``CancelledError`` is no ``Exception`` (nor does anyone send the
      response it may still return, so its background never runs);
    * a raw stream fails after its 200: the body raises out of Starlette's
      ``StreamingResponse.__call__`` before it reaches ``await self.background()``.
      (An SSE stream turns its error into an event and ends normally: no leak.)
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.value = 0

    def acquire(self) -> Callable[[], None]:
        """Count one request in; the returned release is idempotent."""
        self.value += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.value -= 1

        return release

    def reported(self) -> int:
        return self.value if self.enabled else 0


@dataclass
class _Outcome:
    """How one response ended; read once, when it closes."""

    completed: bool = False
    abort_reason: str = ABORT_CANCELLED  # the client left, unless something else is recorded
    first_audio_at: float | None = None
    raised: bool = False  # the body raised: the connection was dropped mid-response
    chunk_times: list[tuple[float, float]] = field(default_factory=list)  # (wall time, audio seconds)


class ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse that always runs ``on_close`` once it is over, however it ends.

    An un-started body generator never runs its ``finally`` (e.g. the client left before
    the first byte), so the clean-up lives here instead: it is what keeps /load and the
    batch slot from leaking.
    """

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None], **kwargs: object) -> None:
        super().__init__(content, **kwargs)  # type: ignore[arg-type]
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


@dataclass(frozen=True)
class PromptReference:
    """The reference a voice-clone prompt carries, and the model seconds its codes cost."""

    seconds: float = 0.0
    ref_text: str = ""
    encode_seconds: float = 0.0  # 0 when the codes were cached


class PromptTooLong(Exception):
    """vllm input_processor.py _validate_prompt_len 440-485 (a VLLMValidationError)."""

    def __init__(self, prompt_tokens: int, max_model_len: int) -> None:
        if prompt_tokens > max_model_len:
            text = (
                f"The decoder prompt (length {prompt_tokens}) is longer than the maximum model length of "
                f"{max_model_len}. Make sure that `max_model_len` is no smaller than the number of text tokens."
            )
        else:
            text = (
                f"The decoder prompt (length {prompt_tokens}) plus the number of requested output tokens "
                f"(at least 1) is longer than the maximum model length of {max_model_len}. Make sure that "
                "`max_model_len` is no smaller than the number of text tokens (prompt + requested output tokens)."
            )
        super().__init__(text)


class Generation:
    """One request in the engine plus its audio; chunks arrive as the model schedules them."""

    def __init__(
        self,
        job: SpeechJob,
        model: StepModel,
        driver: EngineDriver,
        audio: SpeechAudio,
        default_seed: int,
        arrived_at: float,
        reference: PromptReference | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.job = job
        self.faults = faults  # the audio faults (noisy, silent, clipped from a concurrency)
        self.arrived_at = arrived_at  # wall clock (monotonic) when the request came in
        self.driver = driver
        reference = reference or PromptReference(ref_text=job.ref_text)
        prompt_tokens = model.prompt_tokens_for(job.text, reference.seconds, reference.ref_text)
        self.too_long = None if model.prompt_fits(prompt_tokens) else PromptTooLong(prompt_tokens, model.max_model_len or 0)
        plan = model.plan(job.text, job.max_new_tokens, prompt_tokens)
        self.request = EngineRequest(
            request_id=f"speech-{uuid.uuid4().hex}",
            prompt_tokens=prompt_tokens,
            total_frames=plan.frames,
            overhead_seconds=model.overhead_seconds(reference.seconds, encode=False) + reference.encode_seconds,
            total_steps=plan.decode_steps,
        )
        self.output_tokens = plan.decode_steps
        # speech_usage.py qwen3_tts_input_token_details: the text to speak (and instructions,
        # when not blank); reference audio is counted only for Qwen3-TTS in-context cloning,
        # never for Higgs.
        instructions = job.instructions if job.instructions.strip() else ""
        self.text_tokens = model.text_tokens_for(job.text) + (model.text_tokens_for(instructions) if instructions else 0)
        seed = job.seed if job.seed is not None else default_seed
        self.synth = audio.clip(job.text, plan.frames * SAMPLES_PER_FRAME, seed, job.clone_key)
        self.seed = seed

    @property
    def usage(self) -> dict[str, int]:
        inputs = self.text_tokens
        return {"input_tokens": inputs, "output_tokens": self.output_tokens, "total_tokens": inputs + self.output_tokens}

    @property
    def usage_with_details(self) -> dict[str, object]:
        """The SSE ``done`` usage (protocol/audio.py: SpeechTokenUsage with its input split)."""
        usage: dict[str, object] = dict(self.usage)
        usage["input_token_details"] = {"text_tokens": self.text_tokens, "audio_tokens": 0}
        return usage

    @property
    def audio_seconds(self) -> float:
        return self.request.total_frames * BYTES_PER_FRAME / BYTES_PER_SECOND

    async def chunks(self) -> AsyncIterator[tuple[ChunkEvent, bytes]]:
        if self.too_long is not None:
            # Refused when the engine generator first runs: after the API server's work
            # (prompt building, the reference's encode), before the scheduler.
            await asyncio.sleep(self.driver.model_to_wall(self.request.overhead_seconds))
            raise self.too_long
        queue = self.driver.submit(self.request)
        while True:
            event = await queue.get()
            if event is None:
                raise EngineDead(DEAD_STAGE)
            # Rendered off the event loop, phrase by phrase; only this request waits for it.
            await self.synth.ready((event.first_frame + event.frames) * SAMPLES_PER_FRAME)
            pcm = self.synth.frames_pcm(event.first_frame, event.frames)
            if self.faults is not None and self.faults.degrades_audio:
                # The batch this chunk was decoded in: what a broken graph path depends on.
                pcm = self.faults.degrade(pcm, event.batch, event.first_frame)
            yield event, pcm
            if event.final:
                return

    def close(self) -> None:
        self.driver.release(self.request)
        self.synth.cancel()  # a client that left costs no more speech rendering


class SpeechService:
    def __init__(
        self,
        served_names: tuple[str, ...],
        model: StepModel,
        driver: EngineDriver,
        metrics: EmulatorMetrics,
        faults: Faults,
        voice_names: Callable[[], set[str]],
        load: LoadCounter,
        default_seed: int,
        audio: SpeechAudio,
        ref_audio: RefAudioResolver | None = None,
        voices: VoiceStore | None = None,
        life: EngineLife | None = None,
    ) -> None:
        self.served_names = served_names
        self.model = model
        self.driver = driver
        self.metrics = metrics
        self.faults = faults
        self.voice_names = voice_names
        self.load = load
        self.default_seed = default_seed
        self.audio = audio
        self.ref_audio = ref_audio or RefAudioResolver()
        self.voices = voices
        self.life = life or EngineLife()
        self._loaded_voices: set[str] = set()  # serving_speech.py _ref_audio_data_url_cache

    async def reference_for(self, job: SpeechJob) -> PromptReference:
        """The clip and text the prompt carries (resolved, and its codes cached or encoded)."""
        ref_text = job.ref_text
        if job.ref_audio is not None:
            clip = await self.ref_audio.resolve(job.ref_audio)
        elif job.voice is not None and self.voices is not None:
            clip, stored_text = await self._uploaded_clip(job.voice)
            if not ref_text.strip():  # serving_speech.py 797-801
                ref_text = stored_text
        else:
            return PromptReference(ref_text=ref_text)
        rows = self.model.ref_audio_tokens_for(clip.seconds)
        encode_seconds = self.model.params.ref_audio_encode_ms_per_second * clip.seconds / 1000.0
        wait = self.ref_audio.caches.encode_wait(clip, rows, self.driver.clock.now(), encode_seconds)
        return PromptReference(clip.seconds, ref_text, wait)

    async def _uploaded_clip(self, voice: str) -> tuple[ResolvedClip, str]:
        """An uploaded voice as its WAV data URL (serving_speech.py 694-718, 788-799)."""
        assert self.voices is not None
        voice = voice.lower()
        stored = self.voices.stored(voice)
        if stored is None:
            raise WorkerError(400, f"Audio file for uploaded voice '{voice}' is missing")
        sample, meta = stored
        key = f"voice:{voice}:{meta.get('created_at', 0)}"  # stands for the memoized data URL
        if key not in self._loaded_voices:
            # First use: safetensors load, WAV re-encode and base64, all on the event loop.
            seconds = float(meta.get("seconds") or 0.0)
            time.sleep(self.driver.model_to_wall(self.model.voice_first_use_block_seconds(seconds)))  # noqa: ASYNC251 (on purpose)
            self._loaded_voices.add(key)
        clip = self.ref_audio.resolved.get(key)
        if clip is None:
            clip = decoded_clip(sample, await asyncio.to_thread(probe_audio, sample))
            self.ref_audio.remember(key, clip)
        return clip, str(meta.get("ref_text") or "")

    def forget_voice(self, voice: str) -> None:
        """Delete or re-upload drops the memoized data URL (serving_speech.py 852, 1116)."""
        self._loaded_voices = {key for key in self._loaded_voices if not key.startswith(f"voice:{voice}:")}

    async def handle(self, request: Request) -> Response:
        arrived_at = time.monotonic()
        if log.isEnabledFor(logging.DEBUG):
            headers = request.headers
            log.debug(
                "speech request x-request-id=%s traceparent=%s tracestate=%s",
                headers.get("x-request-id"), headers.get("traceparent"), headers.get("tracestate"),
            )  # fmt: skip
        release_load = self.load.acquire()
        handed_over = False
        try:
            try:
                job = validate_speech(parse_speech_request(await _json(request)), self.served_names, self.voice_names())
                if self.life.dead:
                    return self._engine_dead(None)
                # Fetched, decoded and encoded while the prompt is built, before the engine sees it.
                reference = await self.reference_for(job)
            except WorkerError as exc:
                return error_response(exc)
            await self._hang_if_asked()
            if self.faults.take_failure():
                self.metrics.failed_request(FAILED_STAGE_ERROR)
                return JSONResponse(error_body(500, "Speech generation failed: injected fault"), status_code=500)
            generation = Generation(job, self.model, self.driver, self.audio, self.default_seed, arrived_at, reference, self.faults)
            if job.mode == "file" and self.faults.cut_after_chunks is None:
                try:
                    response = await _unless_disconnected(request, self._whole_file(generation))
                except (GenerationFailed, PromptTooLong) as exc:
                    self.metrics.failed_request(FAILED_STAGE_ERROR)
                    message = sanitize_message(f"Speech generation failed: {exc}")
                    return JSONResponse(error_body(500, message), status_code=500)
                except EngineDead as exc:
                    return self._engine_dead(exc.error_stage_id)
                finally:
                    generation.close()
                if response is None:
                    self.metrics.failed_request(FAILED_CLIENT_DISCONNECT)
                    # with_cancellation dropped the handler: load_aware_call never counts it out.
                    handed_over = self.faults.leak_load
                    return Response(status_code=499)  # nobody is listening any more
                return response
            response = self._stream(generation, release_load)
            handed_over = True
            return response
        finally:
            if not handed_over:
                release_load()

    def _engine_dead(self, error_stage_id: int | None) -> JSONResponse:
        """errors.py _create_engine_error_json_response: terminate_if_errored, then the 500."""
        self.metrics.failed_request(FAILED_STAGE_ERROR)
        self.life.terminate()
        return JSONResponse(engine_dead_body(error_stage_id), status_code=500)

    async def _hang_if_asked(self) -> None:
        """The hang fault: silence until it expires or is cleared (clearing frees hung requests)."""
        if not self.faults.hang_seconds:
            return
        deadline = time.monotonic() + self.faults.hang_seconds
        while self.faults.hang_seconds and (remaining := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(0.1, remaining))

    # --- whole file ---------------------------------------------------------------------
    async def _whole_file(self, generation: Generation) -> Response:
        pcm_parts = []
        failing_after = self.faults.error_after_chunks
        async for _, pcm in generation.chunks():
            if failing_after is not None and len(pcm_parts) >= failing_after:
                raise GenerationFailed("injected fault")
            pcm_parts.append(pcm)
        job = generation.job
        pcm = b"".join(pcm_parts)
        if job.speed != 1.0:
            stretched = self.audio.clip(job.text, round(len(pcm) // 2 / job.speed), generation.seed, job.clone_key)
            await stretched.ready()
            pcm = stretched.pcm(0, stretched.total_samples)
        body = await asyncio.to_thread(encode_whole, pcm, job.response_format)
        self._completed(generation, streamed=False)
        usage = generation.usage
        headers = {  # serving_speech.py _build_speech_usage_headers
            "X-VLLM-OMNI-INPUT-TOKENS": str(usage["input_tokens"]),
            "X-VLLM-OMNI-OUTPUT-TOKENS": str(usage["output_tokens"]),
            "X-VLLM-OMNI-TOTAL-TOKENS": str(usage["total_tokens"]),
            "X-VLLM-OMNI-INPUT-TEXT-TOKENS": str(generation.text_tokens),
            "X-VLLM-OMNI-INPUT-AUDIO-TOKENS": "0",
        }
        return Response(body, media_type=CONTENT_TYPES[job.response_format], headers=headers)

    # --- streams ------------------------------------------------------------------------
    def _stream(self, generation: Generation, release_load: Callable[[], None]) -> Response:
        outcome = _Outcome()
        job = generation.job
        if job.mode == "sse":
            body, media_type = self._sse_body(generation, outcome), "text/event-stream"
        elif job.mode == "audio":
            body, media_type = self._raw_body(generation, outcome), CONTENT_TYPES[job.response_format]
        else:  # a whole-file request under the cut fault: drop the connection, as a crash would
            body, media_type = self._cut_body(outcome), CONTENT_TYPES[job.response_format]

        def on_close() -> None:
            generation.close()
            # A raw stream that failed after its 200 never reaches Starlette's background
            # task, so load_aware_call's decrement never runs (LoadCounter).
            if not (self.faults.leak_load and outcome.raised):
                release_load()
            if not outcome.completed:
                self.metrics.aborted_stream(outcome.abort_reason)
                if outcome.abort_reason == ABORT_CANCELLED:
                    self.metrics.failed_request(FAILED_CLIENT_DISCONNECT)

        return ClosingStreamingResponse(body, on_close, media_type=media_type, headers=STREAM_HEADERS)

    async def _cut_body(self, outcome: _Outcome) -> AsyncIterator[bytes]:
        outcome.abort_reason = ABORT_ERROR
        outcome.raised = True
        self.metrics.failed_request(FAILED_STAGE_ERROR)
        raise StreamCut("injected fault: connection cut")
        yield b""  # pragma: no cover  (makes this an async generator)

    async def _audio(self, generation: Generation, outcome: _Outcome) -> AsyncIterator[tuple[bytes, bool]]:
        """PCM chunks of the stream with the cut fault applied; records timing for metrics."""
        cut = self.faults.cut_after_chunks
        failing_after = self.faults.error_after_chunks
        if cut == 0:
            outcome.abort_reason = ABORT_ERROR
            self.metrics.failed_request(FAILED_STAGE_ERROR)
            raise StreamCut("injected fault: connection cut")
        sent = 0
        try:
            async for event, pcm in self._chunks_or_failure(generation, outcome):
                if failing_after is not None and sent >= failing_after:
                    outcome.abort_reason = ABORT_ERROR
                    self.metrics.failed_request(FAILED_STAGE_ERROR)
                    raise GenerationFailed("injected fault")
                now = time.monotonic()
                if pcm:  # serving_speech.py record_audio_chunk: an empty chunk is not audio
                    if outcome.first_audio_at is None:
                        outcome.first_audio_at = now
                        self.metrics.first_audio(now - generation.arrived_at)
                    outcome.chunk_times.append((now, event.frames * SAMPLES_PER_FRAME / SAMPLE_RATE))
                yield pcm, event.final
                sent += 1
                if cut is not None and sent >= cut and not event.final:
                    outcome.abort_reason = ABORT_ERROR
                    self.metrics.failed_request(FAILED_STAGE_ERROR)
                    raise StreamCut("injected fault: connection cut")
        except EngineDead:
            self.life.terminate()  # serving_speech.py 1789-1793
            raise
        outcome.completed = True
        if outcome.chunk_times:
            self.metrics.underrun(_worst_underrun(outcome.chunk_times))
        self._completed(generation, streamed=True)

    async def _chunks_or_failure(self, generation: Generation, outcome: _Outcome) -> AsyncIterator[tuple[ChunkEvent, bytes]]:
        """The generation's chunks; a failure of the engine is recorded as the stream's error."""
        try:
            async for item in generation.chunks():
                yield item
        except (PromptTooLong, EngineDead) as exc:
            outcome.abort_reason = ABORT_ENGINE_DEAD if isinstance(exc, EngineDead) else ABORT_ERROR
            self.metrics.failed_request(FAILED_STAGE_ERROR)
            raise

    async def _raw_body(self, generation: Generation, outcome: _Outcome) -> AsyncIterator[bytes]:
        # serving_speech.py _generate_audio_chunks: the WAV header goes out with the first
        # chunk (even an empty one), never before it.
        header = generation.job.response_format == "wav"
        try:
            async for pcm, _ in self._audio(generation, outcome):
                if header:
                    header = False
                    yield streaming_wav_header()
                yield pcm
        except (GenerationFailed, PromptTooLong, EngineDead) as exc:
            # A raw stream has no error channel: the worker re-raises inside the body
            # (serving_speech.py 1796-1806) and the chunked body ends early, after its 200.
            outcome.raised = True
            raise StreamCut(f"generation failed mid-stream: {exc}") from None
        except StreamCut:
            outcome.raised = True
            raise

    async def _sse_body(self, generation: Generation, outcome: _Outcome) -> AsyncIterator[bytes]:
        # serving_speech.py: _generate_audio_sse_events. The WAV header is its own chunk in
        # _generate_audio_chunks, so it travels as its own delta before the first audio.
        response_format = generation.job.response_format
        emitted_audio = False

        def delta(data: bytes) -> bytes:
            return _sse("speech.audio.delta", {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode(), "response_format": response_format})

        try:
            async for pcm, _ in self._audio(generation, outcome):
                if response_format == "wav" and not emitted_audio:
                    yield delta(streaming_wav_header())
                emitted_audio = True
                yield delta(pcm)
        except (GenerationFailed, PromptTooLong, EngineDead) as exc:
            # serving_speech.py 1876-1890: the error as an event, "message": str(e).
            message = f"Speech generation failed: {exc}" if isinstance(exc, GenerationFailed) else str(exc)
            error: dict[str, object] = {"message": message, "type": "server_error", "param": None, "code": 500}
            if emitted_audio:
                error.update(partial_audio=True, action="discard")  # what was played must be thrown away
            yield _sse("speech.audio.error", {"type": "speech.audio.error", "error": error})
            return
        yield _sse("speech.audio.done", {"type": "speech.audio.done", "usage": generation.usage_with_details})

    def _completed(self, generation: Generation, streamed: bool) -> None:
        e2e = time.monotonic() - generation.arrived_at
        wait = self.driver.model_to_wall(generation.request.queue_wait or 0.0)
        samples = generation.request.total_frames * SAMPLES_PER_FRAME  # audio_frames counts PCM samples
        self.metrics.completed(
            e2e, wait, generation.audio_seconds, samples, streamed,
            prompt_tokens=generation.request.prompt_tokens, generation_tokens=generation.output_tokens,
        )  # fmt: skip


def _sse(event: str, data: dict[str, object]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _worst_underrun(chunks: list[tuple[float, float]]) -> float:
    """Worst wait a real-time player starting at the first chunk would suffer."""
    if not chunks:
        return 0.0
    start = chunks[0][0]
    buffered = 0.0
    worst = 0.0
    for arrived, seconds in chunks:
        worst = max(worst, arrived - (start + buffered))
        buffered += seconds
    return worst


async def _json(request: Request) -> object:
    """The body as FastAPI hands it to the route, after vLLM's ``validate_json_request``
    (``serve/utils/api_utils.py``): any content type but application/json is a 400."""
    media_type = request.headers.get("content-type", "").lower().split(";", maxsplit=1)[0]
    if media_type != "application/json":
        raise validation_error(["Unsupported Media Type: Only 'application/json' is allowed"])
    body = await request.body()
    try:
        return json.loads(body)
    except ValueError as exc:
        position = exc.pos if isinstance(exc, json.JSONDecodeError) else 0
        raise validation_error(
            [{"type": "json_invalid", "loc": ("body", position), "msg": "JSON decode error", "input": {}, "ctx": {"error": getattr(exc, "msg", str(exc))}}]
        ) from None


async def _unless_disconnected(request: Request, work: Coroutine[object, object, Response]) -> Response | None:
    """Run ``work``; if the client disconnects first, cancel it and return None.

    vLLM's ``with_cancellation`` does the same: without it a whole-file request whose client
    left keeps its batch slot until the clip is done."""
    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({work_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch_task.cancel()
        if not work_task.done():
            work_task.cancel()
    if work_task.cancelled() or not work_task.done():
        return None
    return work_task.result()


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
