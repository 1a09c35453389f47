"""``x-request-id`` on every response: an incoming one is echoed, otherwise one is made.

Pure ASGI (no BaseHTTPMiddleware): it must not buffer or wrap streaming bodies.
"""

from __future__ import annotations

import os
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.types import REQUEST_ID_HEADER

_HEADER = REQUEST_ID_HEADER.encode()
# Echoed ids end up in logs and other systems' headers: printable, short, no separators
# that could forge a log line or a second header.
_SAFE_ID = re.compile(rb"^[A-Za-z0-9._:\-]{1,128}$")


def new_request_id() -> str:
    # 128 random bits as hex, like uuid4().hex without building a UUID object per request.
    return os.urandom(16).hex()


def incoming_request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == _HEADER:
            return value.decode("ascii") if _SAFE_ID.match(value) else new_request_id()
    return new_request_id()


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = incoming_request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        header = (_HEADER, request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await self.app(scope, receive, send_with_id)
