"""The emulated worker's HTTP app: the vllm-omni surface plus ``/emulator/*`` controls."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, File, Form, Request, UploadFile, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from gateway.worker.profile import DeployProfile
from gateway.emulator.clock import ScaledClock
from gateway.emulator.driver import EngineDriver
from gateway.emulator.engine import Engine
from gateway.emulator.engine_death import EngineLife
from gateway.emulator.errors import WorkerError, bad_request, error_body, error_response, validation_error
from gateway.emulator.faults import FaultUpdate, Faults
from gateway.emulator.metrics import EmulatorMetrics
from gateway.emulator.ref_audio import RefAudioResolver, probe_audio_seconds
from gateway.emulator.speech import LoadCounter, SpeechService
from gateway.emulator.speech_stream import SpeechStreamHandler, StreamTimeouts
from gateway.emulator.spoken import SpeechAudio
from gateway.worker.timing import StepModel, TimingParams
from gateway.emulator.voices import (
    DEFAULT_MAX_UPLOADED,
    MAX_SAMPLE_BYTES,
    VoiceStore,
    upload_mime_type,
    validate_voice_name,
)

log = logging.getLogger("gateway.emulator")

VLLM_OMNI_VERSION = "0.30.0"


@dataclass
class EmulatorSettings:
    """Everything one emulated worker needs; built by the CLI or by tests."""

    model: str
    profile: DeployProfile
    voices_dir: Path
    served_model_names: tuple[str, ...] = ()
    time_scale: float = 1.0
    seed: int | None = None  # None: the profile's Stage 0 seed (42 as shipped)
    load_tracking: bool = True
    log_stats: bool = True  # False: --disable-log-stats (no vllm_omni:/vllm: statistics)
    max_uploaded_voices: int = DEFAULT_MAX_UPLOADED  # SPEAKER_MAX_UPLOADED
    warm: bool = False  # start with every lazy graph captured, as after a full warm-up
    faults: Faults = field(default_factory=Faults)
    params: TimingParams = field(default_factory=TimingParams)
    audio: Callable[[], SpeechAudio] = SpeechAudio  # what speaks the text (tests inject a failing loader)
    stream_timeouts: StreamTimeouts = field(default_factory=StreamTimeouts)  # /v1/audio/speech/stream

    @property
    def names(self) -> tuple[str, ...]:
        return self.served_model_names or (self.model,)


def create_app(settings: EmulatorSettings) -> FastAPI:
    model = StepModel(settings.profile, settings.params)
    clock = ScaledClock(settings.time_scale)
    driver_ref: list[EngineDriver] = []
    # model_name is the positional model, whatever --served-model-name says (OmniBase).
    metrics = EmulatorMetrics(settings.model, lambda: driver_ref[0].counts(), log_stats=settings.log_stats)
    precaptured = range(1, model.max_num_seqs + 1) if settings.warm and model.lazy_mlp_graph else ()
    engine = Engine(model, clock, observer=metrics, precaptured=precaptured)
    driver = EngineDriver(engine, clock)
    driver_ref.append(driver)
    voices = VoiceStore(settings.voices_dir, settings.max_uploaded_voices)
    if voices.restored:
        log.warning("restored %d uploaded voice(s) from %s", voices.restored, settings.voices_dir)
    upload_lock = asyncio.Lock()
    faults = settings.faults
    load = LoadCounter(settings.load_tracking)
    audio = settings.audio()
    ref_audio = RefAudioResolver(settings.time_scale)
    life = EngineLife(settings.time_scale)
    life.on_death.append(driver.kill)
    speech = SpeechService(
        served_names=settings.names,
        model=model,
        driver=driver,
        metrics=metrics,
        faults=faults,
        voice_names=voices.names,
        load=load,
        default_seed=settings.seed if settings.seed is not None else model.default_seed,
        audio=audio,
        ref_audio=ref_audio,
        voices=voices,
        life=life,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        life.close()
        driver.close()
        audio.close()
        await ref_audio.close()

    app = FastAPI(title="higgs-gateway worker emulator", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.engine = engine
    app.state.engine_life = life  # the CLI hands it its server's stop (terminate_if_errored)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # vLLM answers bad form/body fields with 400 "Bad Request" in its error shape, not FastAPI's 422.
        return error_response(validation_error(list(exc.errors())))

    @app.exception_handler(WorkerError)
    async def _worker_error(_: Request, exc: WorkerError) -> JSONResponse:
        return error_response(exc)

    @app.post("/v1/audio/speech")
    async def create_speech(request: Request) -> Response:
        return await speech.handle(request)

    speech_stream = SpeechStreamHandler(speech, settings.stream_timeouts)

    @app.websocket("/v1/audio/speech/stream")
    async def stream_speech(websocket: WebSocket) -> None:
        await speech_stream.handle(websocket)

    @app.get("/health")
    async def health() -> JSONResponse:
        if faults.unhealthy or life.dead:  # api_server.py health 1953-1960: EngineDeadError -> 503
            return JSONResponse({"status": "unhealthy"}, status_code=503)
        return JSONResponse({"status": "healthy", "details": {"speech_audio": audio.description}})

    @app.get("/load")
    async def server_load() -> JSONResponse:
        return JSONResponse({"server_load": load.reported()})

    @app.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse({"version": VLLM_OMNI_VERSION})

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        # vllm serve/engine/protocol.py ModelCard (owned_by "vllm") with one ModelPermission,
        # both stamped when asked (models/serving.py show_available_models).
        now = int(time.time())
        data = [
            {"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": settings.model,
             "parent": None, "max_model_len": model.max_model_len, "permission": [_permission(now)]}
            for name in settings.names
        ]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/audio/voices")
    async def list_voices() -> JSONResponse:
        # api_server.list_voices: every accepted name (uploads + "default"), then the uploads.
        return JSONResponse({"voices": voices.voice_list(), "uploaded_voices": voices.list()})

    @app.post("/v1/audio/voices")
    async def upload_voice(
        audio_sample: UploadFile | None = File(None),
        speaker_embedding: str | None = Form(None),
        name: str = Form(...),
        consent: str = Form(...),
        ref_text: str | None = Form(None),
        speaker_description: str | None = Form(None),
    ) -> JSONResponse:
        if speaker_embedding is not None:
            # Embedding uploads are a Qwen3-TTS feature; Higgs has no speaker encoder input.
            raise bad_request("speaker_embedding uploads are not supported by this model")
        if audio_sample is None:
            raise bad_request("Either 'audio_sample' or 'speaker_embedding' must be provided")
        voice_name = validate_voice_name(name)
        ref_text = (ref_text or "").strip() or None
        speaker_description = (speaker_description or "").strip() or None
        sample = await audio_sample.read(MAX_SAMPLE_BYTES + 1)
        if len(sample) > MAX_SAMPLE_BYTES:
            raise bad_request(f"File size exceeds maximum limit of 10MB. Got {len(sample)} bytes.")
        mime_type = upload_mime_type(audio_sample.content_type, audio_sample.filename)
        async with upload_lock:
            seconds = await asyncio.to_thread(probe_audio_seconds, sample)
            # serving_speech.py 948 (soundfile decode) and 985 (safetensors save) run on the
            # event loop, under the upload lock: every stream on this worker pauses meanwhile.
            time.sleep(driver.model_to_wall(model.voice_upload_block_seconds(seconds or 0.0)))  # noqa: ASYNC251 (on purpose)
            speech.forget_voice(voice_name.lower())
            voice = voices.add(voice_name, sample, mime_type, consent, lambda _: seconds, ref_text, speaker_description)
        body = {key: voice[key] for key in ("name", "consent", "created_at", "mime_type", "file_size")}
        for optional in ("ref_text", "speaker_description"):
            if voice.get(optional):
                body[optional] = voice[optional]
        return JSONResponse({"success": True, "voice": body})

    @app.delete("/v1/audio/voices/{name}")
    async def delete_voice(name: str) -> JSONResponse:
        voices.delete(name)
        speech.forget_voice(name.lower())
        return JSONResponse({"success": True, "message": f"Voice '{name}' deleted successfully"})

    @app.get("/emulator/faults")
    async def get_faults() -> JSONResponse:
        return JSONResponse(faults.as_dict())

    @app.post("/emulator/faults")
    async def set_faults(request: Request) -> JSONResponse:
        try:
            update = FaultUpdate.model_validate_json(await request.body() or b"{}")
        except ValidationError as exc:
            return JSONResponse(error_body(400, f"Invalid fault update: {exc.errors()[0]['msg']}"), status_code=400)
        faults.apply(update)
        if faults.engine_dead:
            life.die()
        log.warning("faults now %s", faults.as_dict())
        return JSONResponse(faults.as_dict())

    @app.get("/emulator/info")
    async def info() -> JSONResponse:
        counts = driver.counts()
        return JSONResponse(
            {
                "model": settings.model,
                "served_model_names": list(settings.names),
                "profile": settings.profile.source,
                "time_scale": settings.time_scale,
                "max_num_seqs": model.max_num_seqs,
                "decode_graphs": model.decode_graphs,
                "capture_sizes": list(model.capture_sizes),
                "lazy_graph_captured_batch_sizes": sorted(engine.captured) if model.lazy_mlp_graph else [],
                "streams_early": model.streams_early,
                "running": counts.running,
                "waiting": counts.waiting,
                "steps": engine.steps_done,
                # The emulator's own view: the real worker exposes neither cache (ref_cache.py).
                "reference_caches": ref_audio.caches.state(),
                "engine_dead": life.dead,
            }
        )

    return app


def _permission(created: int) -> dict[str, object]:
    return {
        "id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission", "created": created,
        "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False,
        "allow_view": True, "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False,
    }  # fmt: skip
