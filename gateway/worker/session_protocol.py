"""``/v1/audio/speech/stream``: the session config and the per-sentence request, as released.

Shared by the worker emulator and the gateway's sessions (``gateway.sessions``), so both
accept the same configs and answer the same error texts.

The models carry the released class names (``protocol/audio.py``) because pydantic puts
the class name into the error text the client receives: ``Invalid session config: 1
validation error for StreamingSpeechSessionConfig ...`` and, for a config that passes but
cannot build a sentence request, ``Internal error: 1 validation error for
OpenAICreateSpeechRequest ...``.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, field_validator, model_validator

from gateway.worker.sentences import Granularity

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_EMBEDDING_DIM = 8192
SessionFormat = Literal["wav", "pcm", "flac", "mp3", "opus"]


class StreamingSpeechSessionConfig(BaseModel):
    """The ``session.config`` message without its ``type`` (AUD:556–638); unknown keys are ignored."""

    model: str | None = None
    voice: str | None = Field(default=None, validation_alias=AliasChoices("voice", "speaker"))
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    instructions: str | None = None
    response_format: SessionFormat = "wav"
    speed: float | None = Field(default=1.0, ge=0.25, le=4.0)
    max_new_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    initial_codec_chunk_frames: int | None = Field(default=None, ge=0, le=INT64_MAX)
    non_streaming_mode: bool | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    speaker_embedding: list[float] | None = Field(default=None, max_length=MAX_EMBEDDING_DIM)
    stream_audio: bool = False
    word_timestamps: bool = False
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    split_granularity: Granularity = "none"

    @model_validator(mode="after")
    def validate_streaming_constraints(self) -> StreamingSpeechSessionConfig:
        if self.stream_audio:
            if self.response_format != "pcm":
                raise ValueError(
                    "WebSocket streaming audio (stream_audio=true) requires response_format='pcm'. "
                    f"Got response_format='{self.response_format}'."
                )
            if self.speed is None:
                self.speed = 1.0
            elif self.speed != 1.0:
                raise ValueError(
                    "WebSocket stream_audio=true currently requires speed=1.0; "
                    "native speed control is only available through HTTP streaming."
                )
        return self


class OpenAICreateSpeechRequest(BaseModel):
    """The checks the worker's speech request runs when a sentence is turned into one.

    Only those a valid session config can still fail are here (SSS:311–330, AUD:321–325);
    the handler builds it with the same arguments in the same order, so even the
    ``input_value`` of the error text matches.
    """

    input: str
    model: str | None = None
    voice: str | None = None
    task_type: str | None = None
    language: str | None = None
    instructions: str | None = None
    response_format: str = "wav"
    speed: float | None = None
    max_new_tokens: int | None = None
    initial_codec_chunk_frames: int | None = None
    non_streaming_mode: bool | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    speaker_embedding: list[float] | None = None
    stream: bool = False
    word_timestamps: bool = False
    seed: int | None = None

    @field_validator("speaker_embedding")
    @classmethod
    def validate_speaker_embedding(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and not all(math.isfinite(x) for x in v):
            raise ValueError("'speaker_embedding' values must be finite (no NaN or Inf)")
        return v

    @model_validator(mode="after")
    def validate_embedding_constraints(self) -> OpenAICreateSpeechRequest:
        if self.speaker_embedding is not None and self.ref_audio is not None:
            raise ValueError("'speaker_embedding' and 'ref_audio' are mutually exclusive")
        return self


def sentence_request(config: StreamingSpeechSessionConfig, text: str) -> OpenAICreateSpeechRequest:
    """The request the worker builds for one sentence; raises pydantic's ValidationError."""
    return OpenAICreateSpeechRequest(
        input=text,
        model=config.model,
        voice=config.voice,
        task_type=config.task_type,
        language=config.language,
        instructions=config.instructions,
        response_format=config.response_format,
        speed=config.speed,
        max_new_tokens=config.max_new_tokens,
        initial_codec_chunk_frames=config.initial_codec_chunk_frames,
        non_streaming_mode=config.non_streaming_mode,
        ref_audio=config.ref_audio,
        ref_text=config.ref_text,
        x_vector_only_mode=config.x_vector_only_mode,
        speaker_embedding=config.speaker_embedding,
        stream=config.stream_audio,
        word_timestamps=config.word_timestamps,
        seed=config.seed,
    )


def model_not_found(model: str) -> str:
    """``str()`` of vLLM's ErrorResponse for an unserved model: what the session sends (SSS:266–270)."""
    return f"error=ErrorInfo(message={f'The model `{model}` does not exist.'!r}, type='NotFoundError', param='model', code=404)"


def unknown_voice(voice: str) -> str:
    """The Higgs-Audio V3 adapter's refusal of a voice never uploaded (SS:749–781)."""
    return (
        f"Unknown voice '{voice}'. Higgs-Audio V3 has no built-in speakers. "
        "Upload a voice first via POST /v1/audio/voices, or use ref_audio + ref_text."
    )
