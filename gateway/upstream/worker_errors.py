"""Read what a worker said when it refused or failed a request.

vllm-omni answers most errors as ``{"error": {"message", "type", "param", "code"}}`` but
some paths answer FastAPI's ``{"detail": ...}`` (400, 422 or 500). This module only reads
those answers; who is to blame for them, and what the client is told, is
``gateway.upstream.blame``'s job. Nothing read here is ever shown to a client.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import orjson


def worker_error_message(body: bytes) -> tuple[str, str | None]:
    """(message, param) from either error shape; falls back to the raw text."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()
        return (text[:500] or "worker error", None)
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict):
            param = error.get("param")
            if isinstance(param, str):
                param = param.removeprefix("body.")  # vLLM's request validation names "body.<field>"
            return (str(error.get("message") or "worker error"), param if isinstance(param, str) else None)
        if isinstance(error, str):
            return (error, None)
        detail = parsed.get("detail")
        if isinstance(detail, str):
            return (detail, None)
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            first = detail[0]
            loc = [str(p) for p in first.get("loc", ()) if p != "body"]
            return (str(first.get("msg", "invalid request")), ".".join(loc) or None)
    return ("worker error", None)


def worker_lost_a_voice(message: str) -> bool:
    """A worker's 400 saying it does not hold an uploaded voice (vllm-omni: "Unknown voice
    '...'" or "Audio file for uploaded voice '...' is missing")."""
    lowered = message.lower()
    return lowered.startswith("unknown voice") or lowered.startswith("audio file for uploaded voice")


class FetchFailure(Enum):
    """Why a worker could not use a ``ref_audio`` URL, as its 500 says."""

    UNREACHABLE = "unreachable"  # refused, unresolvable, a 4xx from the remote, a bad URL
    TOO_LARGE = "too_large"  # over the worker's clip size limit


# vllm 0.30.0 ``multimodal/media/connector.py`` (``_wrap_media_fetch_error``) and
# ``connections.py`` (the size limits), raised while vllm-omni builds the prompt and
# answered as 500 "Speech generation failed: <this>" (``serving_speech.py`` create_speech).
# "Cannot connect to host" is aiohttp's text for a refused or unresolvable host, after the
# worker's own three tries.
_FETCH_FAILURE_MARKERS = (
    ("Failed to fetch media from URL", FetchFailure.UNREACHABLE),
    ("Cannot connect to host", FetchFailure.UNREACHABLE),
    ("Maximum file size exceeded", FetchFailure.TOO_LARGE),
    ("Remote media download exceeds", FetchFailure.TOO_LARGE),
)


def ref_audio_fetch_failure(message: str) -> FetchFailure | None:
    """What a worker's 500 says about fetching the reference audio, if it is about that."""
    for marker, failure in _FETCH_FAILURE_MARKERS:
        if marker in message:
            return failure
    return None


# vllm 0.30.0 ``v1/engine/exceptions.py`` (``EngineDeadError``): the message every dead
# engine answers with, as a 500 (vllm-omni ``entrypoints/serve/utils/errors.py`` 24-64, which
# adds ``request_id`` and ``error_stage_id`` beside it); the worker then shuts down.
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue"


def engine_died(message: str) -> bool:
    """A worker's 500 saying its engine is dead (it serves nothing more)."""
    return message.startswith(ENGINE_DEAD_MESSAGE)


def prompt_over_model_length(message: str) -> bool:
    """A worker's 400 from vLLM's prompt length check (vllm 0.30.0
    ``v1/engine/input_processor.py`` ``_validate_prompt_len``): "The decoder prompt (length
    N) is longer than the maximum model length of M", or "... plus the number of requested
    output tokens (at least 1) is longer than the maximum model length"."""
    return "longer than the maximum model length" in message
