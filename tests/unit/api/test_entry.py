"""The entry table: one lookup hands a listed path to its handler, the rest to the framework,
and every request gets its id once, whichever way it goes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway.api.entry import Entry, EntryPath, id_header
from gateway.telemetry.request_context import REQUEST_ID


class Fast:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str]] = []

    async def enter(self, scope: Scope, receive: Receive, send: Send, request_id: str) -> None:
        self.seen.append((request_id, REQUEST_ID.get(), scope["state"]["request_id"]))
        response = Response(b"fast")
        response.raw_headers.append(id_header(request_id))
        await response(scope, receive, send)


async def framework_route(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"framework {request.state.request_id} {REQUEST_ID.get()}")


def stack(fast: Fast) -> Entry:
    return Entry([EntryPath("http", "POST", "/fast", fast.enter)], Starlette(routes=[Route("/fast", framework_route, methods=["GET"]), Route("/other", framework_route)]))


async def test_a_listed_path_goes_to_its_handler_with_the_id_set_once() -> None:
    fast = Fast()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=stack(fast)), base_url="http://t") as client:
        given = await client.post("/fast", headers={"x-request-id": "req-1"})
        made = await client.post("/fast")
    assert given.text == "fast" and given.headers.get_list("x-request-id") == ["req-1"]
    assert made.headers.get_list("x-request-id") == [fast.seen[1][0]]
    assert fast.seen[0] == ("req-1", "req-1", "req-1")  # the handler's argument, the log context, the state
    assert REQUEST_ID.get() is None  # reset once the request is over


async def test_anything_else_goes_to_the_framework_with_the_id_on_its_response() -> None:
    fast = Fast()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=stack(fast)), base_url="http://t") as client:
        other = await client.get("/other", headers={"x-request-id": "req-2"})
        same_path_other_method = await client.get("/fast", headers={"x-request-id": "req-3"})
        missing = await client.get("/nowhere", headers={"x-request-id": "req-4"})
    assert other.text == "framework req-2 req-2" and other.headers.get_list("x-request-id") == ["req-2"]
    assert same_path_other_method.text == "framework req-3 req-3" and fast.seen == []
    assert missing.status_code == 404 and missing.headers["x-request-id"] == "req-4"


async def test_lifespan_reaches_the_framework_without_a_request_id() -> None:
    scopes: list[dict[str, Any]] = []

    async def framework(scope: Scope, receive: Receive, send: Send) -> None:
        scopes.append(dict(scope))

    await Entry([], framework)({"type": "lifespan"}, _never, _never)
    assert scopes == [{"type": "lifespan"}]


def test_two_handlers_for_one_path_are_refused() -> None:
    fast = Fast()
    with pytest.raises(ValueError, match="two entry paths"):
        Entry([EntryPath("http", "POST", "/fast", fast.enter), EntryPath("http", "POST", "/fast", fast.enter)], Starlette())


def test_the_table_draws_each_route_with_its_handler_then_the_framework() -> None:
    fast = Fast()
    entry = Entry([EntryPath("websocket", None, "/ws", fast.enter), EntryPath("http", "POST", "/fast", fast.enter)], Starlette())
    assert entry.drawing() == [("WebSocket /ws", "Fast.enter"), ("POST /fast", "Fast.enter"), ("anything else", "FastAPI")]


async def _never(*_: Any) -> Any:
    raise AssertionError("not called")
