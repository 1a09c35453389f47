"""``POST /v1/audio/speech``: the OpenAI request body, plus a short whitelist of Higgs extensions.

OpenAI's fields, limits and defaults (``response_format`` defaults to mp3, ``input`` at most
4096 characters, ``speed`` 0.25-4). The Higgs extensions below pass through to the worker;
any other field is a 400 naming it, as OpenAI's own API rejects unknown fields.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway.audio.formats import AudioFormat
from gateway.errors import GatewayError, bad_request
from gateway.security.data_uri import MAX_HEADER_CHARS, max_payload_chars
from gateway.types.codec import MIN_AUDIO_TOKENS
from gateway.types.text_limits import MAX_INPUT_CHARS  # shared with voice sessions
from gateway.worker_payload import SpeechFields, min_new_tokens_message

# The worker takes any max_new_tokens (it replaces Stage 0's max_tokens, 2048 = ~82 s by
# default); the real bound is the workers' max_model_len, checked in
# gateway.worker_payload.WorkerPayloads.
INT64_MAX = 2**63 - 1

# Fields accepted beyond OpenAI's (what reaches the worker: gateway.worker_payload).
HIGGS_EXTENSIONS = ("ref_audio", "ref_text", "seed", "max_new_tokens", "language")
# Room in a body for every field but ref_audio: the text fields at their caps even with
# every character escaped (12 bytes for an astral one as \uXXXX\uXXXX), and formatting.
OTHER_FIELDS_BYTES = 256 * 1024


def max_speech_body_bytes(ref_audio_max_bytes: int) -> int:
    """The largest body a valid speech request can need, so a larger one is refused (413)
    as it is read, before it is parsed: the longest ``ref_audio`` data URI, 1 character in
    32 of it escaped (encoders that write ``/`` as ``\\/``; base64 of compressed audio has
    1 in 64), and the other fields."""
    ref_audio = max_payload_chars(ref_audio_max_bytes) + len("data:") + MAX_HEADER_CHARS + 1
    return ref_audio + ref_audio // 32 + OTHER_FIELDS_BYTES


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
    return bad_request(plain_message(param, error["type"], error.get("ctx") or {}, error["msg"]), param)


def plain_message(param: str | None, kind: str, ctx: dict[str, Any], fallback: str) -> str:
    """The project's own sentence for a field pydantic refused ("'speed' must be at most 4."),
    not pydantic's wording ("Value error, ...", "String should have at most ...")."""
    field = f"'{param}'" if param else "The request"
    match kind:
        case "string_too_long":
            return f"{field} must be at most {ctx['max_length']} characters."
        case "string_too_short":
            return f"{field} must not be empty." if ctx.get("min_length") == 1 else f"{field} must be at least {ctx['min_length']} characters."
        case "greater_than_equal":
            return f"{field} must be at least {ctx['ge']}."
        case "greater_than":
            return f"{field} must be greater than {ctx['gt']}."
        case "less_than_equal":
            return f"{field} must be at most {ctx['le']}."
        case "less_than":
            return f"{field} must be less than {ctx['lt']}."
        case "string_type":
            return f"{field} must be a string."
        case "int_type" | "int_parsing" | "int_from_float":
            return f"{field} must be an integer."
        case "float_type" | "float_parsing" | "finite_number":
            return f"{field} must be a number."
        case "bool_type" | "bool_parsing":
            return f"{field} must be true or false."
        case "literal_error":
            return f"{field} must be one of {ctx['expected']}."
        case "value_error":
            return f"{field} {ctx['error']}."  # our own validators' sentences
    return f"{field}: {fallback}."
