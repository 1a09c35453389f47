"""OpenAI ``stream_format: "sse"`` framing of the encoded audio, one event per chunk."""

from __future__ import annotations

import json
from base64 import b64encode
from collections.abc import Mapping

# Base64 needs no JSON escaping, so a delta is assembled from fixed halves around it:
# no per-chunk dict or serializer on the streaming path.
_DELTA_HEAD = b'data: {"type":"speech.audio.delta","audio":"'
_DELTA_TAIL = b'"}\n\n'
_USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def sse_delta(audio: bytes) -> bytes:
    """One ``speech.audio.delta`` event carrying the next bytes of the encoded stream.

    Decoding and concatenating every delta gives exactly the plain (non-SSE) response.
    """
    return _DELTA_HEAD + b64encode(audio) + _DELTA_TAIL


def sse_done(usage: Mapping[str, int]) -> bytes:
    """The closing ``speech.audio.done`` event; ``total_tokens`` defaults to input + output."""
    input_tokens = int(usage.get("input_tokens", 0))
    output_tokens = int(usage.get("output_tokens", 0))
    total_tokens = int(usage.get("total_tokens", input_tokens + output_tokens))
    counts = dict(zip(_USAGE_KEYS, (input_tokens, output_tokens, total_tokens), strict=True))
    return _event({"type": "speech.audio.done", "usage": counts})


def sse_error(message: str, code: str | None = None, partial_audio: bool = False) -> bytes:
    """An ``error`` event for a failure after the stream started (the status is already 200).

    Once audio went out, it says so the way vllm-omni's own ``speech.audio.error`` does
    (``partial_audio: true, action: "discard"``): what was played is not the whole clip.
    """
    error: dict[str, object] = {"message": message, "type": "server_error", "param": None, "code": code}
    if partial_audio:
        error.update(partial_audio=True, action="discard")
    return _event({"type": "error", "error": error})
