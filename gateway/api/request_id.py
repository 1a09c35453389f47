"""``x-request-id`` on every response: an incoming one is echoed, otherwise one is made.
While the request runs, the id is ``REQUEST_ID`` (every log line it causes carries it).

Pure ASGI (no BaseHTTPMiddleware): it must not buffer or wrap streaming bodies.
"""

from __future__ import annotations

import os

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.security.headers import REQUEST_ID_PATTERN
from gateway.telemetry.request_context import REQUEST_ID
from gateway.types import REQUEST_ID_HEADER

_HEADER = REQUEST_ID_HEADER.encode()


def new_request_id() -> str:
    # 128 random bits as hex, like uuid4().hex without building a UUID object per request.
    return os.urandom(16).hex()


def incoming_request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == _HEADER:
            # Echoed ids end up in logs and other systems' headers. One pattern for the whole
            # gateway (the documented charset), matched in full: ``re.match`` with ``$``
            # let an id with a trailing newline through, to be echoed as a header value.
            text = value.decode("latin-1")
            return text if REQUEST_ID_PATTERN.fullmatch(text) else new_request_id()
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

        token = REQUEST_ID.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)
