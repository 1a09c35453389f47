"""Worker error bodies in either shape are read; fetch failures are recognised by their text."""

from __future__ import annotations

import orjson
import pytest

from gateway.upstream.worker_errors import FetchFailure, ref_audio_fetch_failure, worker_error_message


@pytest.mark.parametrize(
    ("body", "message_part", "param"),
    [
        ({"error": {"message": "voice 'x' not found", "type": "BadRequest", "param": "voice", "code": 400}}, "voice 'x'", "voice"),
        ({"detail": "input is empty"}, "input is empty", None),
        ({"detail": [{"loc": ["body", "input"], "msg": "field required"}]}, "field required", "input"),
        ({"error": {"message": "generation failed", "type": "server_error", "param": None, "code": 500}}, "generation failed", None),
        ({"error": "plain"}, "plain", None),
        ([1, 2], "worker error", None),
    ],
)
def test_both_shapes(body: object, message_part: str, param: str | None) -> None:
    message, got_param = worker_error_message(orjson.dumps(body))
    assert message_part in message and got_param == param


def test_non_json_body() -> None:
    assert worker_error_message(b"Internal Server Error") == ("Internal Server Error", None)


@pytest.mark.parametrize(
    ("message", "failure"),
    [
        # vllm 0.30.0 multimodal/media/connector.py _wrap_media_fetch_error (a remote 4xx)
        ("Speech generation failed: Failed to fetch media from URL: HTTP 404 error (parameter=image_url, value=http://h/a.wav)", FetchFailure.UNREACHABLE),
        # aiohttp's text for a refused or unresolvable host (vllm connections.py async_get_bytes)
        ("Speech generation failed: Cannot connect to host 127.0.0.1:9 ssl:default [Connect call failed ('127.0.0.1', 9)]", FetchFailure.UNREACHABLE),
        # vllm 0.30.0 connections.py HTTPResponseSizeExceededError (VLLM_MAX_AUDIO_CLIP_FILESIZE_MB)
        ("Speech generation failed: Maximum file size exceeded: HTTP response exceeded maximum size of 26214400 bytes (received at least 26279936 bytes) (parameter=audio_filesize_mb, value=25.0625)", FetchFailure.TOO_LARGE),
        ("Speech generation failed: CUDA error: out of memory", None),
    ],
)
def test_fetch_failures_are_recognised(message: str, failure: FetchFailure | None) -> None:
    assert ref_audio_fetch_failure(message) is failure
