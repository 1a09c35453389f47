"""Security, logs: a credential in any record's text is masked on the handler, whoever logged it.

The line below is the one uvicorn writes for a WebSocket handshake; the gateway also strips
``api_key`` from the scope before the server logs it (tests/integration/test_security_log_secrets.py
reads a served gateway's whole log), this is the net under every other logger.
"""

from __future__ import annotations

import io
import json
import logging

import pytest

from gateway.access_log import configure_logging
from gateway.api.session_entry import take_query_key
from gateway.telemetry.log_redaction import redact

KEY = "hgw-alice-0f3b9c2e7a51d84c6e1a9d4c"


@pytest.mark.parametrize(
    "text",
    [
        f"/v1/audio/speech/stream?api_key={KEY}",
        f"/v1/audio/speech/stream?lang=en&api_key={KEY}&x=1",
        f"/x?token={KEY}",
        f"/v1/audio/speech/stream?api%5Fkey={KEY}",
        f"Authorization: Bearer {KEY}",
        f"offered bearer.{KEY}",
        f"http://collector/?access_token={KEY}",
    ],
)
def test_credentials_are_masked(text: str) -> None:
    assert KEY not in redact(text)


def test_ordinary_lines_are_left_alone() -> None:
    for text in ("POST /v1/audio/speech 200", "missing Bearer token", "speed=1.0 and format=pcm", "/path?lang=en"):
        assert redact(text) == text


def test_the_gateway_handler_masks_uvicorns_handshake_line() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("INFO", stream=stream)
    try:
        logging.getLogger("uvicorn.error").info(
            '%s - "WebSocket %s" [accepted]', "127.0.0.1:5000", f"/v1/audio/speech/stream?api_key={KEY}"
        )
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    record = json.loads(stream.getvalue().strip())
    assert KEY not in stream.getvalue()
    assert record["msg"] == '127.0.0.1:5000 - "WebSocket /v1/audio/speech/stream?api_key=***" [accepted]'


def test_the_query_key_is_taken_out_of_the_scope() -> None:
    scope = {"query_string": f"lang=en&api_key={KEY}".encode()}
    assert take_query_key(scope) == KEY
    assert scope["query_string"] == b"lang=en"
    encoded = {"query_string": f"api%5Fkey={KEY}".encode()}
    assert take_query_key(encoded) == KEY and encoded["query_string"] == b""
    untouched = {"query_string": b"lang=en"}
    assert take_query_key(untouched) is None and untouched["query_string"] == b"lang=en"
