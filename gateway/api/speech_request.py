"""``POST /v1/audio/speech``: the OpenAI request body, plus a short whitelist of Higgs extensions.

OpenAI's fields, limits and defaults (``response_format`` defaults to mp3, ``input`` at most
4096 characters, ``speed`` 0.25-4). The Higgs extensions below pass through to the worker;
any other field is a 400 naming it, as OpenAI's own API rejects unknown fields.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway.errors import GatewayError, bad_request
from gateway.audio.formats import AudioFormat
from gateway.types.codec import MIN_AUDIO_TOKENS
from gateway.types.text_limits import MAX_INPUT_CHARS  # shared with voice sessions
from gateway.worker_payload import SpeechFields, min_new_tokens_message

# The worker takes any max_new_tokens (it replaces Stage 0's max_tokens, 2048 = ~82 s by
# default); the real bound is the workers' max_model_len, checked in
# gateway.worker_payload.WorkerPayloads.
INT64_MAX = 2**63 - 1

# Fields accepted beyond OpenAI's (what reaches the worker: gateway.worker_payload).
HIGGS_EXTENSIONS = ("ref_audio", "ref_text", "seed", "max_new_tokens", "language")


class VoiceObject(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=256)


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    model: str = Field(min_length=1, max_length=256)
    input: str = Field(max_length=MAX_INPUT_CHARS)
    voice: str | VoiceObject = Field(...)
    instructions: str | None = Field(None, max_length=MAX_INPUT_CHARS)
    response_format: AudioFormat = AudioFormat.MP3
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio", "sse"] = "audio"
    # Higgs extensions (documented whitelist).
    ref_audio: str | None = Field(None, max_length=20 * 1024 * 1024)
    ref_text: str | None = Field(None, max_length=MAX_INPUT_CHARS)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    max_new_tokens: int | None = Field(None, ge=MIN_AUDIO_TOKENS, le=INT64_MAX)
    language: str | None = Field(None, max_length=64)

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must contain text to speak")
        return value

    @property
    def voice_name(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id

    @property
    def fields(self) -> SpeechFields:
        return SpeechFields(
            model=self.model,
            voice=self.voice_name,
            ref_audio=self.ref_audio,
            ref_text=self.ref_text,
            seed=self.seed,
            max_new_tokens=self.max_new_tokens,
            language=self.language,
            instructions=self.instructions,
        )


def parse_speech_request(body: bytes) -> SpeechRequest:
    """Parse and validate; every failure is a 400 envelope naming the field."""
    if not body:
        raise bad_request("Request body is empty; send a JSON object.", code="invalid_json")
    try:
        document: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"Request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(document, dict):
        raise bad_request("Request body must be a JSON object.", code="invalid_json")
    try:
        return SpeechRequest.model_validate(document)
    except ValidationError as exc:
        raise _first_error(exc) from exc


def _first_error(exc: ValidationError) -> GatewayError:
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    # "voice.str" / "voice.VoiceObject.id" are union branches; the client sent "voice".
    param = loc[0] if loc else None
    if error["type"] == "extra_forbidden":
        return bad_request(
            f"Unknown field '{param}'. Supported: OpenAI's speech fields and the Higgs extensions "
            f"{', '.join(HIGGS_EXTENSIONS)}.",
            param,
            code="unknown_parameter",
        )
    if error["type"] == "missing":
        return bad_request(f"Missing required field '{param}'.", param, code="missing_required_parameter")
    if param == "response_format" and error["type"] == "enum":
        allowed = ", ".join(f.value for f in AudioFormat)
        return bad_request(f"Unsupported response_format; use one of {allowed}.", param)
    if param == "voice":
        return bad_request("voice must be a string or an object {\"id\": \"...\"}.", param)
    if param == "max_new_tokens" and error["type"] == "greater_than_equal":
        return bad_request(min_new_tokens_message(), param)
    return bad_request(f"{param}: {error['msg']}" if param else str(error["msg"]), param)
