"""``POST /v1/audio/speech``: OpenAI's request body and the released worker's, read as each means it.

OpenAI's fields keep OpenAI's limits and defaults (``response_format`` defaults to mp3,
``input`` at most 4096 characters, ``speed`` 0.25-4, ``stream_format`` ``audio``). Every
other field of vllm-omni 0.30.0's ``OpenAICreateSpeechRequest`` is accepted with the
worker's meaning: ``speaker`` for ``voice``, ``references`` for ``ref_audio``/``ref_text``,
``stream`` (SSE unless ``stream_format`` says ``audio``), ``sample_rate`` (the gateway
resamples: a Higgs worker refuses every rate), the tuning fields passed on to the worker,
and the fields a Higgs worker would silently drop (other models' voice inputs) refused
with a sentence saying so. Fields neither OpenAI nor the worker knows are a 400 naming
them, as OpenAI answers: the worker ignores them, which hides a typo behind audio that
is not what was asked for. The table is docs/clients.md.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any, Literal, get_args, get_origin

import orjson
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway.api.speech_aliases import normalize_references
from gateway.audio.formats import AudioFormat
from gateway.audio.resample import SAMPLE_RATES, supported_sample_rates
from gateway.errors import GatewayError, bad_request
from gateway.security.data_uri import MAX_HEADER_CHARS, max_payload_chars
from gateway.types.codec import MIN_AUDIO_TOKENS
from gateway.types.text_limits import MAX_INPUT_CHARS  # shared with voice sessions
from gateway.worker_payload import SpeechFields, min_new_tokens_message

# The worker takes any max_new_tokens (it replaces Stage 0's max_tokens, 2048 = ~82 s by
# default); the real bound is the workers' max_model_len, checked in
# gateway.worker_payload.WorkerPayloads.
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
MAX_EMBEDDING_DIM = 8192  # the worker's bound on speaker_embedding

# Fields accepted beyond OpenAI's, each with the worker's meaning (docs/clients.md).
HIGGS_EXTENSIONS = (
    "stream", "speaker", "references", "sample_rate", "ref_audio", "ref_text", "seed", "max_new_tokens",
    "language", "task_type", "extra_params", "initial_codec_chunk_frames", "non_streaming_mode",
)  # fmt: skip
# Worker fields for other models that a Higgs worker drops without a word: a client
# asking for them would get audio that is not what it asked for, so they are refused.
NOT_FOR_HIGGS = {
    "ref_audio_2": "a second speaker's reference (MOSS-TTSD dialogue)",
    "ambient_sound": "sound-effect synthesis (MOSS-SoundEffect)",
    "duration_seconds": "a target duration (MOSS-SoundEffect)",
    "x_vector_only_mode": "embedding-only cloning (Qwen3-TTS)",
    "speaker_embedding": "cloning from a precomputed embedding (Qwen3-TTS)",
}
StreamFormat = Literal["audio", "sse"]
# The worker sets these three on Stage 0's sampling parameters; every other key of
# extra_params lands in its internal extra_args (where it keeps e.g. kv_transfer_params),
# which no client of a shared fleet should write.
SAMPLING_OVERRIDES = ("temperature", "top_p", "top_k")
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

    # OpenAI requires model and voice; the worker does not (its served model, its default voice).
    model: str | None = Field(None, min_length=1, max_length=256)
    input: str = Field(max_length=MAX_INPUT_CHARS)
    voice: str | VoiceObject | None = Field(None, validation_alias=AliasChoices("voice", "speaker"))
    instructions: str | None = Field(None, max_length=MAX_INPUT_CHARS)
    response_format: AudioFormat = AudioFormat.MP3
    speed: float | None = Field(1.0, ge=0.25, le=4.0)
    stream_format: StreamFormat | None = None
    # The worker's streaming switch: SSE unless stream_format is "audio" (see ``delivery``).
    stream: bool = False
    sample_rate: int | None = Field(None, gt=0)
    # Higgs extensions: passed on to the worker.
    ref_audio: str | list[str] | None = Field(None, max_length=20 * 1024 * 1024)
    ref_text: str | None = Field(None, max_length=MAX_INPUT_CHARS)
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    max_new_tokens: int | None = Field(None, ge=MIN_AUDIO_TOKENS, le=INT64_MAX)
    language: str | None = Field(None, max_length=64)
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    extra_params: dict[str, Any] | None = None
    initial_codec_chunk_frames: int | None = Field(None, ge=0, le=INT64_MAX)
    non_streaming_mode: bool | None = None
    word_timestamps: bool = False
    # Other models' inputs, typed as the worker types them and refused when set (NOT_FOR_HIGGS).
    ref_audio_2: str | None = None
    ambient_sound: str | None = None
    duration_seconds: float | None = Field(None, ge=0.0)
    x_vector_only_mode: bool | None = None
    speaker_embedding: list[float] | list[list[float]] | None = Field(None, max_length=MAX_EMBEDDING_DIM)

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must contain text to speak")
        return value

    @property
    def voice_name(self) -> str | None:
        return self.voice.id if isinstance(self.voice, VoiceObject) else self.voice

    @property
    def tempo(self) -> float:
        return 1.0 if self.speed is None else self.speed

    def delivery(self, raw_stream_models: Collection[str] = ()) -> StreamFormat:
        """How the audio goes out: ``stream_format`` when given; else ``stream: true`` is SSE
        (the worker's meaning) except for a model named in ``raw_stream_models`` (Boson's
        hosted API streams raw audio on ``stream: true``); else raw audio (OpenAI's default)."""
        if self.stream_format is not None:
            return self.stream_format
        if self.stream and self.model not in raw_stream_models:
            return "sse"
        return "audio"

    @property
    def fields(self) -> SpeechFields:
        ref_audio = self.ref_audio
        assert not isinstance(ref_audio, list)  # refused by parse_speech_request
        return SpeechFields(
            model=self.model,
            voice=self.voice_name,
            ref_audio=ref_audio,
            ref_text=self.ref_text,
            seed=self.seed,
            max_new_tokens=self.max_new_tokens,
            language=self.language,
            instructions=self.instructions,
            task_type=self.task_type,
            extra_params=self.extra_params,
            initial_codec_chunk_frames=self.initial_codec_chunk_frames,
            non_streaming_mode=self.non_streaming_mode,
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
    if "voice" in document and "speaker" in document:
        # The worker reads "voice" first and ignores the other spelling.
        document = {key: value for key, value in document.items() if key != "speaker"}
    try:
        speech = SpeechRequest.model_validate(normalize_references(document))
    except ValidationError as exc:
        raise _first_error(exc) from exc
    _check_what_higgs_can_honour(speech)
    return speech


def _check_what_higgs_can_honour(speech: SpeechRequest) -> None:
    """Refusals on values that are well-formed but that the gateway and a Higgs worker cannot serve."""
    for name, what in NOT_FOR_HIGGS.items():
        if getattr(speech, name) not in (None, False):
            raise bad_request(
                f"{name} asks for {what}, which Higgs-Audio V3 does not do (a worker would ignore it); "
                "remove it. To clone a voice, send ref_audio or references.",
                name,
            )
    if isinstance(speech.ref_audio, list):
        raise bad_request(
            "ref_audio must be one string (a data: URI or an allowed https URL): Higgs-Audio V3 clones from one reference.",
            "ref_audio",
        )
    if speech.extra_params is not None:
        _check_sampling_overrides(speech.extra_params)
    if speech.word_timestamps:
        # The worker's own refusals: streamed, and (the gateway always streams from its
        # workers) never in a header on a whole file.
        message = (
            "word_timestamps=true is currently supported by the WebSocket /v1/audio/speech/stream path. "
            "Use session.config with stream_audio=true and response_format='pcm'."
        )
        raise bad_request(message, "word_timestamps")
    rate = speech.sample_rate
    if rate is not None and rate not in supported_sample_rates(speech.response_format):
        rates = ", ".join(str(r) for r in supported_sample_rates(speech.response_format))
        raise bad_request(f"sample_rate {rate} is not available for {speech.response_format.value}; use one of {rates}.", "sample_rate")


def _check_sampling_overrides(params: dict[str, Any]) -> None:
    other = sorted(set(params) - set(SAMPLING_OVERRIDES))
    if other:
        raise bad_request(
            f"extra_params may set only {', '.join(SAMPLING_OVERRIDES)}; {', '.join(map(repr, other))} would reach "
            "the worker's internal sampling arguments.",
            "extra_params",
        )
    # The worker assigns them as they are: a wrong type would fail the request on the worker.
    temperature, top_p, top_k = (params.get(name) for name in SAMPLING_OVERRIDES)
    if temperature is not None and not (_is_number(temperature) and 0 <= temperature <= 100):
        raise bad_request("extra_params.temperature must be a number from 0 to 100.", "extra_params")
    if top_p is not None and not (_is_number(top_p) and 0 < top_p <= 1):
        raise bad_request("extra_params.top_p must be a number above 0 and at most 1.", "extra_params")
    if top_k is not None and not (isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= -1):
        raise bad_request("extra_params.top_k must be a whole number, -1 (no limit) or more.", "extra_params")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _first_error(exc: ValidationError) -> GatewayError:
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    # "voice.str" / "voice.VoiceObject.id" are union branches; the client sent "voice".
    param = loc[0] if loc else None
    if error["type"] == "extra_forbidden":
        return bad_request(
            f"Unknown field '{param}'. Supported: OpenAI's speech fields and the worker's "
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
    if param == "sample_rate":
        return bad_request(f"sample_rate must be a whole number of Hz, one of {', '.join(map(str, SAMPLE_RATES))}.", param)
    if error["type"] == "literal_error" and param in SpeechRequest.model_fields:
        # pydantic-core lists the choices from a hash map, in an order that changes from one
        # process to the next: the field's own Literal gives them in the order declared.
        return bad_request(f"'{param}' must be one of {_choices(SpeechRequest.model_fields[param].annotation)}.", param)
    return bad_request(plain_message(param, error["type"], error.get("ctx") or {}), param)


def _choices(annotation: Any) -> str:
    """A Literal's values (also inside ``| None``), as "'a', 'b' or 'c'"."""
    literals = [annotation] if get_origin(annotation) is Literal else [a for a in get_args(annotation) if get_origin(a) is Literal]
    values = [repr(value) for literal in literals for value in get_args(literal)]
    return f"{', '.join(values[:-1])} or {values[-1]}" if len(values) > 1 else "".join(values)


def plain_message(param: str | None, kind: str, ctx: dict[str, Any]) -> str:
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
        case "int_parsing_size":
            return f"{field} is too large a number."
        case "float_type" | "float_parsing" | "finite_number":
            return f"{field} must be a number."
        case "bool_type" | "bool_parsing":
            return f"{field} must be true or false."
        case "dict_type":
            return f"{field} must be a JSON object."
        case "list_type":
            return f"{field} must be an array."
        case "too_long":
            return f"{field} must have at most {ctx['max_length']} items."
        case "too_short":
            return f"{field} must have at least {ctx['min_length']} items."
        case "literal_error":
            return f"{field} must be one of {ctx['expected']}."
        case "value_error":
            return f"{field} {ctx['error']}."  # our own validators' sentences
    # A kind not worded above: still a sentence of ours, never pydantic's own text.
    return f"{field} is not a valid value."
