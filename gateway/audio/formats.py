"""The response formats a client may ask for, and what each is called on the wire."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType


class AudioFormat(StrEnum):
    """OpenAI ``response_format`` values; the gateway encodes every one of them itself."""

    MP3 = "mp3"
    OPUS = "opus"
    AAC = "aac"
    FLAC = "flac"
    WAV = "wav"
    PCM = "pcm"


DEFAULT_FORMAT = AudioFormat.MP3  # OpenAI's default when response_format is absent

CONTENT_TYPES: Mapping[AudioFormat, str] = MappingProxyType(
    {
        AudioFormat.MP3: "audio/mpeg",
        AudioFormat.OPUS: "audio/opus",
        AudioFormat.AAC: "audio/aac",
        AudioFormat.FLAC: "audio/flac",
        AudioFormat.WAV: "audio/wav",
        AudioFormat.PCM: "audio/pcm",
    }
)
SSE_CONTENT_TYPE = "text/event-stream"

# Without these, reverse proxies (nginx) and some clients buffer a stream and the
# first audio reaches the listener seconds late.
STREAMING_HEADERS: Mapping[str, str] = MappingProxyType(
    {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
)


def parse_format(value: str) -> AudioFormat:
    """The format named by ``value`` (case-insensitive); ``ValueError`` lists the valid ones."""
    try:
        return AudioFormat(value.strip().lower())
    except ValueError:
        valid = ", ".join(f.value for f in AudioFormat)
        raise ValueError(f"unsupported response_format {value!r}; expected one of: {valid}") from None


def content_type(fmt: AudioFormat) -> str:
    """The ``Content-Type`` of a plain (non-SSE) response in ``fmt``."""
    return CONTENT_TYPES[fmt]


def response_media_type(fmt: AudioFormat, sse: bool) -> str:
    """The ``Content-Type`` of a response: SSE wraps any audio format in ``text/event-stream``."""
    return SSE_CONTENT_TYPE if sse else CONTENT_TYPES[fmt]
