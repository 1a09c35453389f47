"""A refused session handshake: an HTTP answer where the server can send one, else an
``error`` message and a close code that says whether to try again."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.websockets import WebSocket

from gateway.api.session_entry import _deny
from gateway.errors import GatewayError

FULL = GatewayError(503, "This gateway already serves 1 voice sessions; retry shortly.", code="too_many_sessions",
                    headers={"Retry-After": "1"})  # fmt: skip


async def _denied(error: GatewayError, extensions: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/v1/audio/speech/stream", "headers": [], "extensions": extensions}
    await _deny(WebSocket(scope, receive, send), error, "req-1")
    return sent


async def test_with_the_denial_extension_the_refusal_is_an_http_answer() -> None:
    sent = await _denied(FULL, {"websocket.http.response": {}})
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    assert start["type"] == "websocket.http.response.start" and start["status"] == 503
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    assert headers["retry-after"] == "1" and headers["x-request-id"] == "req-1"
    assert json.loads(body)["error"]["code"] == "too_many_sessions"


@pytest.mark.parametrize(("status", "code"), [(503, 1013), (429, 1013), (403, 1008), (401, 1008)])
async def test_without_it_the_error_is_a_message_then_a_close(status: int, code: int) -> None:
    sent = await _denied(GatewayError(status, "refused for a reason", code="some_code"), {})
    assert [m["type"] for m in sent] == ["websocket.accept", "websocket.send", "websocket.close"]
    assert json.loads(sent[1]["text"]) == {"type": "error", "message": "refused for a reason"}
    assert sent[2]["code"] == code
