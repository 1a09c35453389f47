"""Reference audio for voice cloning: check its shape and measure it, never fetch URLs.

A real worker downloads a URL ``ref_audio``; the emulator accepts the URL as given (no
network at run time) and times it as a typical clip. Data and file URIs are decoded to
measure their length, which must be 1-30 s as on the real worker.
"""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path
from urllib.parse import unquote, urlparse

import av

from gateway.emulator.errors import bad_request

MIN_SECONDS = 1.0
MAX_SECONDS = 30.0
URL_ASSUMED_SECONDS = 5.0  # a URL clip is not fetched; time it as a typical 5 s reference


def probe_audio_seconds(data: bytes) -> float | None:
    """Duration of an encoded audio file (any format PyAV reads), or None if unreadable."""
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                return None
            stream = container.streams.audio[0]
            samples = 0
            rate = stream.rate or stream.codec_context.sample_rate
            for frame in container.decode(stream):
                samples += frame.samples
                rate = frame.sample_rate or rate
            return samples / rate if rate else None
    except (av.error.FFmpegError, ValueError, UnicodeDecodeError):
        return None


def ref_audio_seconds(ref_audio: str) -> float:
    """Validate ``ref_audio`` (data URI, file URI or http(s) URL); return its length in seconds."""
    if ref_audio.startswith("data:"):
        header, _, payload = ref_audio.partition(",")
        if not header.endswith(";base64") or not payload:
            raise bad_request("ref_audio data URI must be base64 encoded: data:<mime>;base64,<data>", "ref_audio")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("ref_audio data URI is not valid base64", "ref_audio") from None
        return _checked_duration(probe_audio_seconds(data))
    parsed = urlparse(ref_audio)
    if parsed.scheme in ("http", "https") and parsed.netloc:
        return URL_ASSUMED_SECONDS
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
        if not path.is_file():
            raise bad_request(f"ref_audio file not found: {path}", "ref_audio")
        return _checked_duration(probe_audio_seconds(path.read_bytes()))
    raise bad_request("ref_audio must be an http(s) URL, a data: URI or a file: URI", "ref_audio")


def _checked_duration(seconds: float | None) -> float:
    if seconds is None:
        raise bad_request("ref_audio could not be decoded as audio", "ref_audio")
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise bad_request(
            f"ref_audio must be between {MIN_SECONDS:g} and {MAX_SECONDS:g} seconds, got {seconds:.2f}", "ref_audio"
        )
    return seconds
