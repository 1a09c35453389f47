"""Security, clients that hang up: a client leaving mid-body is nobody's error. It is counted
499 (the access log's "client closed"), never logged at ERROR with a traceback or counted as a
500, which would let any client fill the error log and the 5xx alerts at will."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from starlette.requests import ClientDisconnect, Request

from gateway.api.body import read_json_body
from gateway.api.errors import CLIENT_CLOSED, as_gateway_error
from gateway.api.relay_response import ClientGone


def request(messages: list[dict[str, Any]]) -> Request:
    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/v1/audio/speech", "headers": [(b"content-type", b"application/json")]}
    return Request(scope, receive)


async def test_a_hang_up_mid_body_is_client_gone() -> None:
    half = request([{"type": "http.request", "body": b'{"in', "more_body": True}, {"type": "http.disconnect"}])
    with pytest.raises(ClientGone):
        await read_json_body(half, 1024, timeout_s=30)


@pytest.mark.parametrize("exc", [ClientDisconnect(), ClientGone()])
def test_anywhere_else_it_is_499_without_an_error_line(exc: Exception, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        error = as_gateway_error(exc)
    assert error.status == CLIENT_CLOSED and error.code == "client_closed"
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
