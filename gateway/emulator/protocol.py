"""``POST /v1/audio/speech``: the request body and the worker's checks, in its order.

The body model follows vllm-omni 0.30.0 ``protocol/audio.py`` ``OpenAICreateSpeechRequest``
(unknown fields ignored; its own validators); a body it rejects is FastAPI's request
validation error as vLLM renders it (400 "Bad Request", ``param`` like
``body.max_new_tokens``). The checks after it follow ``serving_speech.py``
``create_speech`` in order:

1. ``voice`` "default" (any case, as sent) means no voice;
2. ``sample_rate``, before anything else (Higgs supports no other rate);
3. the model name (404);
4. ``word_timestamps`` (a WebSocket-only feature streaming, a ``--forced-aligner`` one
   otherwise: 400 either way here);
5. ``speed`` on a stream;
6. the Higgs adapter's ``validate``: an unknown voice, unless ``ref_audio`` is given
   (``_apply_uploaded_speaker`` ignores the voice then), then empty input.

Errors from ``create_error_response`` carry no ``param`` (except the model's 404).
The reference audio is resolved afterwards (``gateway.emulator.ref_audio``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.emulator.errors import WorkerError, bad_request, validation_error

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
ResponseFormat = Literal["wav", "pcm", "flac", "mp3", "opus"]
StreamMode = Literal["audio", "sse", "file"]
DEFAULT_VOICE = "default"


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: str
    model: str | None = None
    voice: str | None = Field(None, validation_alias=AliasChoices("voice", "speaker"))
    instructions: str | None = None
    response_format: ResponseFormat = "wav"
    sample_rate: int | None = Field(None, gt=0)
    speed: float | None = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["sse", "audio"] | None = None
    stream: bool = False
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=INT64_MAX)  # no tighter bound: it replaces max_tokens
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    extra_params: dict[str, Any] | None = None
    word_timestamps: bool = False

    @field_validator("voice", mode="before")
    @classmethod
    def _normalize_voice(cls, voice: Any) -> Any:
        if isinstance(voice, dict):
            if "id" not in voice:
                raise ValueError("voice dict must contain 'id'")
            return voice["id"]
        return voice

    @model_validator(mode="before")
    @classmethod
    def _references_alias(cls, data: Any) -> Any:
        """The Higgs cookbook's ``references: [{audio_path, text}]`` maps onto ref_audio/ref_text
        (``normalize_references_alias``)."""
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
        return {key: value for key, value in data.items() if key != "references"} | {"ref_audio": audio_path}

    @model_validator(mode="after")
    def _streaming_constraints(self) -> SpeechRequest:
        if self.mode != "file" and self.response_format not in ("pcm", "wav"):
            raise ValueError(
                "Streaming (stream=true, stream_format='audio', or stream_format='sse') "
                "requires response_format='pcm' or 'wav'. "
                f"Got response_format='{self.response_format}'."
            )
        return self

    @property
    def mode(self) -> StreamMode:
        if self.stream_format == "audio":
            return "audio"
        return "sse" if self.stream or self.stream_format == "sse" else "file"


@dataclass(frozen=True)
class SpeechJob:
    """A validated request: what to generate and how to send it."""

    text: str
    mode: StreamMode
    response_format: str
    speed: float
    voice: str | None  # uploaded voice name (lower case), None = no uploaded voice
    ref_audio: str | None  # to resolve (fetch, decode, measure) before generating
    ref_text: str
    seed: int | None
    max_new_tokens: int | None
    clone_key: str | None  # what the cloned timbre derives from
    instructions: str = ""


def parse_speech_request(body: Any) -> SpeechRequest:
    try:
        return SpeechRequest.model_validate(body)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        raise validation_error(errors) from None


def validate_speech(
    request: SpeechRequest, served_names: tuple[str, ...], known_voices: set[str], forced_aligner: bool = False
) -> SpeechJob:
    voice = request.voice
    if voice is not None and voice.lower() == DEFAULT_VOICE and DEFAULT_VOICE not in known_voices:
        voice = None
    if request.sample_rate is not None:  # the Higgs adapter lists no supported output rates
        raise bad_request("sample_rate is not supported by the current TTS model")
    if request.model is not None and request.model not in served_names:
        raise WorkerError(404, f"The model `{request.model}` does not exist.", "model")
    mode = request.mode
    if request.word_timestamps and mode != "file":
        raise bad_request(
            "word_timestamps=true is currently supported by the WebSocket /v1/audio/speech/stream path. "
            "Use session.config with stream_audio=true and response_format='pcm'."
        )
    if request.word_timestamps and not forced_aligner:
        raise bad_request("word_timestamps=true requires the server to be launched with --forced-aligner.")
    if mode != "file" and request.speed is not None and request.speed != 1.0:
        label = "Streaming" if mode == "audio" else "SSE streaming"
        raise bad_request(
            f"{label} is not supported with speed adjustment. Use a non-streaming request or remove the speed parameter."
        )
    uploaded = None
    if voice is not None and request.ref_audio is None:  # with ref_audio the voice is ignored
        if voice.lower() not in known_voices:
            raise bad_request(
                f"Unknown voice '{voice}'. Higgs-Audio V3 has no built-in speakers. Upload a voice first via "
                "POST /v1/audio/voices, or use ref_audio + ref_text."
            )
        uploaded = voice.lower()
    if not request.input or not request.input.strip():
        raise bad_request("higgs_audio_v3: input text cannot be empty")
    return SpeechJob(
        text=request.input,
        mode=mode,
        response_format=request.response_format,
        speed=request.speed if request.speed is not None else 1.0,
        voice=uploaded,
        ref_audio=request.ref_audio,
        ref_text=request.ref_text or "",
        seed=request.seed,
        max_new_tokens=request.max_new_tokens,
        clone_key=request.ref_audio[-256:] if request.ref_audio else uploaded,
        instructions=request.instructions or "",
    )
