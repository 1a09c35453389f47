"""Reading a JSON request body within the configured size limit."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request

from gateway.errors import GatewayError


async def read_json_body(request: Request, limit: int) -> bytes:
    content_type = request.headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
    if content_type not in ("application/json", ""):
        raise GatewayError(415, f"Content-Type must be application/json, not {content_type!r}.", code="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise GatewayError(413, f"Request body exceeds {limit} bytes.", code="payload_too_large")
    # The ASGI messages read directly (what ``request.stream()`` does, without an async
    # generator per request); a body in one message, the usual case, is not copied.
    parts: list[bytes] = []
    size = 0
    receive = request.receive
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        part = message.get("body", b"")
        if part:
            size += len(part)
            if size > limit:
                raise GatewayError(413, f"Request body exceeds {limit} bytes.", code="payload_too_large")
            parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)
