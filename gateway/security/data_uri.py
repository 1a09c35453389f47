"""A ``data:`` URI judged at a cost bounded by its limits, not by its size.

A client chooses the shape of a data URI, so every refusal that needs no decoding comes
first and costs O(1): the header (media type and parameters) is searched for only within
``MAX_HEADER_CHARS``, and the payload's decoded size follows from its length by arithmetic.
Only a payload that fits is scanned, in fixed-size slices (never one copy of the whole
payload, and never decoded whole: the worker decodes it again). A large scan runs in a
thread that hands the GIL back between slices, so the event loop keeps serving meanwhile.

The accepted form is the worker's (vLLM's ``MediaConnector._load_data_url`` and
``AudioMediaIO.load_base64``): ``base64`` is the last parameter, spelled so, and the payload
is strict base64 (no whitespace), at most ``4 * ceil(max_bytes / 3)`` characters.
"""

from __future__ import annotations

import asyncio
import binascii
import time
from dataclasses import dataclass

from gateway.security.errors import RefAudioError
from gateway.voices.probe import SUPPORTED_NAMES, sniff_format

# "audio/" + a registered subtype (RFC 6838 caps names at 127 characters) and a few
# parameters fit many times over; a longer header is not a reference clip.
MAX_HEADER_CHARS = 256
# Base64 characters scanned per slice: a multiple of 4, so every slice decodes on its own.
SLICE_CHARS = 1 << 20
# Payloads longer than this are scanned in a thread (~0.3 ms of decoding on the loop below).
THREAD_SCAN_CHARS = 256 * 1024
# Base64 characters holding the bytes the container sniffer reads (gateway.voices.probe.sniff_format: 12).
SNIFF_CHARS = 16
BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def max_payload_chars(max_bytes: int) -> int:
    """The longest base64 text of ``max_bytes`` bytes: the worker's own limit on it."""
    return 4 * ((max_bytes + 2) // 3)


@dataclass(frozen=True, slots=True)
class DataUri:
    """A data URI whose header passed: ``value[start:]`` is its payload (not sliced out)."""

    value: str
    start: int

    @property
    def payload_chars(self) -> int:
        return len(self.value) - self.start

    @property
    def decoded_bytes(self) -> int:
        """Exact for valid base64 (whole quads, ``=`` padding only at the end)."""
        padding = 2 if self.value.endswith("==") else 1 if self.value.endswith("=") else 0
        return self.payload_chars // 4 * 3 - padding

    @property
    def needs_thread(self) -> bool:
        return self.payload_chars > THREAD_SCAN_CHARS


def split(value: str, max_bytes: int) -> DataUri:
    """The cheap checks: header found within its cap, audio type, base64 last, size by arithmetic."""
    comma = value.find(",", 5, 5 + MAX_HEADER_CHARS + 1)
    if comma < 0:
        if len(value) > 5 + MAX_HEADER_CHARS:
            raise RefAudioError(
                f"ref_audio data: URI header (media type and parameters) is longer than {MAX_HEADER_CHARS} characters."
            )
        raise RefAudioError("ref_audio data: URIs must be base64: data:audio/wav;base64,<data>.")
    params = value[5:comma].split(";")  # at most MAX_HEADER_CHARS characters
    mime = params[0].strip().lower()
    if len(params) < 2 or params[-1] != "base64":
        raise RefAudioError("ref_audio data: URIs must be base64: data:audio/wav;base64,<data>.")
    if not mime.startswith("audio/"):
        raise RefAudioError(f"ref_audio data: URI has type {mime or 'none'!r}; it must be audio/*.")
    uri = DataUri(value, comma + 1)
    if uri.payload_chars > max_payload_chars(max_bytes):
        raise RefAudioError(f"ref_audio is larger than {max_bytes} bytes.", code="ref_audio_too_large")
    if uri.payload_chars % 4:
        raise RefAudioError("ref_audio data: URI is not valid base64 (its length is not a multiple of 4).")
    if uri.decoded_bytes > max_bytes:  # within the 2 bytes the character limit rounds up
        raise RefAudioError(f"ref_audio is larger than {max_bytes} bytes.", code="ref_audio_too_large")
    return uri


def scan(uri: DataUri, in_thread: bool = False) -> None:
    """Strict base64 all through, and audio by its first bytes; raises ``RefAudioError``.

    Checking the alphabet (a byte table) is several times faster than decoding, and nothing
    needs the decoded audio but its first bytes: only those and the last quad (where the
    padding is) are decoded. ``in_thread``: hand the GIL back after every slice, so the event
    loop's thread waits one slice for it, not the interpreter's switch interval."""
    value, end = uri.value, len(uri.value)
    if not value.isascii():  # O(1): CPython keeps the flag
        raise RefAudioError("ref_audio data: URI is not valid base64 (non-ASCII characters).")
    last_quad = max(uri.start, end - 4)
    for begin in range(uri.start, last_quad, SLICE_CHARS):
        if value[begin : min(begin + SLICE_CHARS, last_quad)].encode("ascii").translate(None, BASE64_ALPHABET):
            raise RefAudioError("ref_audio data: URI is not valid base64.")
        if in_thread:
            time.sleep(0)
    try:
        binascii.a2b_base64(value[last_quad:], strict_mode=True)  # "=" only as the final padding
        head = binascii.a2b_base64(value[uri.start : min(uri.start + SNIFF_CHARS, end)], strict_mode=True)
    except binascii.Error as exc:
        raise RefAudioError("ref_audio data: URI is not valid base64.") from exc
    if sniff_format(head) is None:
        raise RefAudioError(f"ref_audio data is not a recognised audio file (accepted: {SUPPORTED_NAMES}).")


async def scan_off_loop(uri: DataUri) -> None:
    """``scan``, in a thread when the payload is large enough to hold the loop up."""
    if uri.needs_thread:
        await asyncio.to_thread(scan, uri, True)
    else:
        scan(uri)
