"""The audio layer: worker PCM (24 kHz mono s16le) -> the client's format, as bytes arrive."""

from gateway.audio.encoder import EncoderClosedError, StreamEncoder
from gateway.audio.factory import open_encoder
from gateway.audio.formats import (
    CONTENT_TYPES,
    DEFAULT_FORMAT,
    SSE_CONTENT_TYPE,
    STREAMING_HEADERS,
    AudioFormat,
    content_type,
    parse_format,
    response_media_type,
)
from gateway.audio.pcm import SampleAligner, pcm_bytes_for_seconds, pcm_duration_seconds
from gateway.audio.sse import sse_delta, sse_done, sse_error
from gateway.audio.tempo import MAX_SPEED, MIN_SPEED, validate_speed

__all__ = [
    "CONTENT_TYPES",
    "DEFAULT_FORMAT",
    "MAX_SPEED",
    "MIN_SPEED",
    "SSE_CONTENT_TYPE",
    "STREAMING_HEADERS",
    "AudioFormat",
    "EncoderClosedError",
    "SampleAligner",
    "StreamEncoder",
    "content_type",
    "open_encoder",
    "parse_format",
    "pcm_bytes_for_seconds",
    "pcm_duration_seconds",
    "response_media_type",
    "sse_delta",
    "sse_done",
    "sse_error",
    "validate_speed",
]
