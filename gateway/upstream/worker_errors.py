"""Turn a worker's error body, in either of its shapes, into the gateway's answer.

vllm-omni answers most errors as ``{"error": {"message", "type", "param", "code"}}`` but
some paths answer FastAPI's ``{"detail": ...}`` (400, 422 or 500). Clients must only ever
see the OpenAI envelope, with a status that tells them whose fault it was.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import GatewayError

# Worker statuses worth another worker before any byte reached the client.
RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})


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
            return (str(error.get("message") or "worker error"), error.get("param"))
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


def translate_worker_error(status: int, body: bytes, worker_id: str) -> GatewayError:
    """A worker's non-2xx answer as the error the client should see."""
    message, param = worker_error_message(body)
    if status in (400, 422):
        # The worker judged the request itself (unknown voice, bad ref_audio, ...).
        return GatewayError(400, message, param=param, code="invalid_value")
    if status == 413:
        return GatewayError(413, message, param=param, code="payload_too_large")
    if status in RETRYABLE_STATUSES:
        return GatewayError(502, f"Speech generation failed on worker {worker_id}: {message}", code="upstream_error")
    # 404 unknown model and other 4xx mean our configuration and the worker disagree.
    return GatewayError(502, f"Worker {worker_id} rejected the request ({status}): {message}", code="upstream_error")
