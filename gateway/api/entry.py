"""The gateway's entry: the request id, set once, and the paths served before the framework.

Every HTTP request and WebSocket handshake comes through ``Entry`` first. It reads the
caller's ``x-request-id`` (or makes one) once: into the scope's state (routes read it as
``request.state.request_id``), onto ``REQUEST_ID`` for every log line the request causes,
and onto the response. Then one lookup in a declarative table (``EntryPath``: scope
type, method, path) hands the hot paths to their handler directly, and everything else to
the framework app.

The hot paths skip the framework: the router, the exception and exit-stack middleware,
the route wrapper and one ``send`` wrapper per middleware that every audio chunk would pass
through cost a measurable share of a relayed request's CPU on few cores. Their handlers
render their own errors and put the id on their own response (no ``send`` wrapper).
``create_app`` writes the table; docs/architecture.md draws it (tests/unit/test_architecture_doc.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.api.request_id import incoming_request_id
from gateway.telemetry.request_context import REQUEST_ID
from gateway.types import REQUEST_ID_HEADER

_HEADER = REQUEST_ID_HEADER.encode()

# (scope, receive, send, request id): serves the request, its response included.
EntryHandler = Callable[[Scope, Receive, Send, str], Awaitable[None]]
FRAMEWORK = "FastAPI"  # what the table's "anything else" goes to, as drawn


@dataclass(frozen=True, slots=True)
class EntryPath:
    scope_type: Literal["http", "websocket"]
    method: str | None  # None for a WebSocket (its scope has no method)
    path: str
    handler: EntryHandler  # a bound method: its ``Class.method`` is what the doc draws

    @property
    def route(self) -> str:
        return f"{self.method if self.scope_type == 'http' else 'WebSocket'} {self.path}"

    @property
    def serves(self) -> str:
        return getattr(self.handler, "__qualname__", type(self.handler).__qualname__)


class Entry:
    """ASGI: the request id, then a table lookup; lifespan and unlisted paths to ``framework``."""

    def __init__(self, paths: Sequence[EntryPath], framework: ASGIApp) -> None:
        self.paths = tuple(paths)
        self.framework = framework
        self._handlers = {(p.scope_type, p.method, p.path): p.handler for p in self.paths}
        if len(self._handlers) != len(self.paths):
            raise ValueError("two entry paths for the same scope type, method and path")

    def drawing(self) -> list[tuple[str, str]]:
        """(route, handler) per row, in table order, then the framework's: docs/architecture.md."""
        return [*((p.route, p.serves) for p in self.paths), ("anything else", FRAMEWORK)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self.framework(scope, receive, send)
            return
        request_id = incoming_request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        token = REQUEST_ID.set(request_id)
        try:
            handler = self._handlers.get((kind, scope.get("method"), scope["path"]))
            if handler is not None:
                await handler(scope, receive, send, request_id)
            elif kind == "http":
                await self.framework(scope, receive, _with_id(send, request_id))
            else:
                await self.framework(scope, receive, send)
        finally:
            REQUEST_ID.reset(token)


def _with_id(send: Send, request_id: str) -> Send:
    header = (_HEADER, request_id.encode())

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), header]
        await send(message)

    return send_with_id


def id_header(request_id: str) -> tuple[bytes, bytes]:
    """The response header an entry handler adds itself."""
    return _HEADER, request_id.encode()
