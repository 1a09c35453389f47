"""Reading a JSON request body within the configured size limit and deadline."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.types import Receive

from gateway.api.relay_response import ClientGone
from gateway.errors import GatewayError


async def read_json_body(request: Request, limit: int, timeout_s: float | None = None) -> bytes:
    """The body, or a refusal: 415 (not JSON), 413 (over ``limit``), 408 (not all there within
    ``timeout_s``: a client trickling or stalling a body would otherwise hold what the request
    took before it, its key's stream slot included, for as long as it likes). A client that
    hangs up mid-body raises ``ClientGone``: nobody is left to answer, and it is no error of ours."""
    content_type = request.headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
    if content_type not in ("application/json", ""):
        raise GatewayError(415, f"Content-Type must be application/json, not {content_type!r}.", code="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise GatewayError(413, f"Request body exceeds {limit} bytes.", code="payload_too_large")
    if timeout_s is None:
        return await _read(request.receive, limit)
    try:
        async with asyncio.timeout(timeout_s):
            return await _read(request.receive, limit)
    except TimeoutError:
        raise GatewayError(
            408, f"The request body did not arrive within {timeout_s:g} s (server.body_timeout_s).",
            code="request_timeout", headers={"Connection": "close"},  # the rest of the body is not read
        ) from None  # fmt: skip


async def _read(receive: Receive, limit: int) -> bytes:
    # The ASGI messages read directly (what ``request.stream()`` does, without an async
    # generator per request); a body in one message, the usual case, is not copied.
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        part = message.get("body", b"")
        if part:
            size += len(part)
            if size > limit:
                raise GatewayError(413, f"Request body exceeds {limit} bytes.", code="payload_too_large")
            parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)
