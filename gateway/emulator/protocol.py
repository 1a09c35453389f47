"""``POST /v1/audio/speech``: the request body and the worker's checks, in its order.

Unknown fields are ignored, as on the real worker; every refusal is a ``WorkerError``
with the real status (404 unknown model, 400 for the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.emulator.encode import STREAMABLE_FORMATS
from gateway.emulator.errors import WorkerError, bad_request
from gateway.emulator.ref_audio import ref_audio_seconds

INT64_MAX = 2**63 - 1
ResponseFormat = Literal["wav", "pcm", "flac", "mp3", "opus"]
StreamMode = Literal["audio", "sse", "file"]


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: str
    model: str | None = None
    voice: str | dict[str, Any] | None = None
    speaker: str | None = None
    response_format: ResponseFormat = "wav"
    stream_format: Literal["audio", "sse"] | None = None
    stream: bool | None = None
    speed: float | None = Field(1.0, ge=0.25, le=4.0)
    sample_rate: int | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    seed: int | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=INT64_MAX)  # no tighter bound: max_tokens caps it
    extra_params: dict[str, Any] | None = None
    # Accepted and ignored by Higgs.
    instructions: str | None = None
    language: str | None = None
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _references_alias(cls, data: Any) -> Any:
        """The Higgs cookbook's ``references: [{audio_path, text}]`` maps onto ref_audio/ref_text
        (protocol/audio.py: OpenAICreateSpeechRequest.normalize_references_alias)."""
        if not isinstance(data, dict) or data.get("references") is None:
            return data
        refs = data["references"]
        if not isinstance(refs, list) or not refs:
            raise ValueError("'references' must be a non-empty array of {audio_path, text} objects")
        if len(refs) > 1:
            raise ValueError("'references' only supports a single reference; multi-shot voice clone is not supported")
        first = refs[0]
        if not isinstance(first, dict):
            raise ValueError("'references[0]' must be an object with 'audio_path' and optional 'text'")
        audio_path = first.get("audio_path")
        if not isinstance(audio_path, str) or not audio_path:
            raise ValueError("'references[0].audio_path' is required and must be a string (URL, data: URI, or file path)")
        if data.get("ref_audio") and data["ref_audio"] != audio_path:
            raise ValueError("'references' and 'ref_audio' are mutually exclusive")
        text = first.get("text")
        if isinstance(text, str) and text.strip():
            if data.get("ref_text") and data["ref_text"] != text:
                raise ValueError("'references[0].text' and 'ref_text' conflict; supply only one")
            data = {**data, "ref_text": text}
        return {**data, "ref_audio": audio_path}


@dataclass(frozen=True)
class SpeechJob:
    """A validated request: what to generate and how to send it."""

    text: str
    mode: StreamMode
    response_format: str
    speed: float
    voice: str | None  # uploaded voice name (lower case), None = default voice
    ref_audio_seconds: float
    ref_text: str
    seed: int | None
    max_new_tokens: int | None
    clone_key: str | None  # what the cloned timbre derives from


def parse_speech_request(body: Any) -> SpeechRequest:
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    try:
        return SpeechRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise bad_request(f"Invalid request: {details}", param) from None


def validate_speech(request: SpeechRequest, served_names: tuple[str, ...], known_voices: set[str]) -> SpeechJob:
    if request.model is not None and request.model not in served_names:
        raise WorkerError(404, f"The model `{request.model}` does not exist.", "model")
    if not request.input.strip():
        raise bad_request("Input text cannot be empty", "input")
    if request.sample_rate is not None:
        raise bad_request("sample_rate is not supported for this model (it always outputs 24000 Hz)", "sample_rate")
    mode: StreamMode = request.stream_format or ("sse" if request.stream else "file")
    if mode != "file":
        if request.response_format not in STREAMABLE_FORMATS:
            raise bad_request(
                f"Streaming supports response_format 'pcm' or 'wav', not '{request.response_format}'", "response_format"
            )
        if request.speed not in (None, 1.0):
            raise bad_request("speed is not supported with streaming; use speed=1.0", "speed")
    voice = _resolve_voice(request, known_voices)
    ref_seconds = ref_audio_seconds(request.ref_audio) if request.ref_audio else 0.0
    clone_key = request.ref_audio[-256:] if request.ref_audio else voice
    return SpeechJob(
        text=request.input,
        mode=mode,
        response_format=request.response_format,
        speed=request.speed if request.speed is not None else 1.0,
        voice=voice,
        ref_audio_seconds=ref_seconds,
        ref_text=request.ref_text or "",
        seed=request.seed,
        max_new_tokens=request.max_new_tokens,
        clone_key=clone_key,
    )


def _resolve_voice(request: SpeechRequest, known_voices: set[str]) -> str | None:
    raw = request.voice if request.voice is not None else request.speaker
    if isinstance(raw, dict):
        raw = raw.get("id")
        if not isinstance(raw, str):
            raise bad_request("voice object must be {\"id\": \"<name>\"}", "voice")
    if raw is None or raw.strip().lower() in ("", "default"):
        return None
    name = raw.strip().lower()
    if name not in known_voices:
        raise bad_request(
            f"Unknown voice '{raw}'. This model has no built-in voices; upload one with POST /v1/audio/voices "
            "or use 'default'.",
            "voice",
        )
    return name
