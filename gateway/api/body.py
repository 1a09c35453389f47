"""Reading a JSON request body within the configured size limit."""

from __future__ import annotations

from starlette.requests import Request

from gateway.errors import GatewayError


async def read_json_body(request: Request, limit: int) -> bytes:
    content_type = request.headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
    if content_type not in ("application/json", ""):
        raise GatewayError(415, f"Content-Type must be application/json, not {content_type!r}.", code="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise GatewayError(413, f"Request body exceeds {limit} bytes.", code="payload_too_large")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > limit:
            raise GatewayError(413, f"Request body exceeds {limit} bytes.", code="payload_too_large")
    return bytes(body)
