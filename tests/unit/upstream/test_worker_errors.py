"""Worker error bodies in either shape become the OpenAI envelope with a sensible status."""

from __future__ import annotations

import orjson
import pytest

from gateway.upstream.worker_errors import translate_worker_error


@pytest.mark.parametrize(
    ("status", "body", "expected_status", "message_part", "param"),
    [
        (400, {"error": {"message": "voice 'x' not found", "type": "BadRequest", "param": "voice", "code": 400}}, 400, "voice 'x'", "voice"),
        (400, {"detail": "input is empty"}, 400, "input is empty", None),
        (422, {"detail": [{"loc": ["body", "input"], "msg": "field required"}]}, 400, "field required", "input"),
        (500, {"error": {"message": "generation failed", "type": "server_error", "param": None, "code": 500}}, 502, "generation failed", None),
        (500, {"detail": "boom"}, 502, "boom", None),
        (404, {"error": {"message": "model not found"}}, 502, "model not found", None),
    ],
)
def test_both_shapes(status: int, body: dict, expected_status: int, message_part: str, param: str | None) -> None:
    error = translate_worker_error(status, orjson.dumps(body), "low_latency-0")
    assert error.status == expected_status
    assert message_part in error.message
    assert error.param == param
    assert set(error.envelope()["error"]) == {"message", "type", "param", "code"}


def test_non_json_body() -> None:
    error = translate_worker_error(500, b"Internal Server Error", "w")
    assert error.status == 502
    assert "Internal Server Error" in error.message
