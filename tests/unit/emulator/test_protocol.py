"""Request checks of POST /v1/audio/speech, in the worker's order, without a server."""

from __future__ import annotations

import pytest

from gateway.emulator.errors import WorkerError, error_body
from gateway.emulator.protocol import parse_speech_request, validate_speech

NAMES = ("bosonai/higgs-audio-v3-tts-4b",)


def check(body: dict[str, object], voices: set[str] | None = None):  # type: ignore[no-untyped-def]
    return validate_speech(parse_speech_request(body), NAMES, voices or set())


def refused(body: object, voices: set[str] | None = None) -> WorkerError:
    with pytest.raises(WorkerError) as caught:
        validate_speech(parse_speech_request(body), NAMES, voices or set())
    return caught.value


def test_modes() -> None:
    assert check({"input": "hi"}).mode == "file"
    assert check({"input": "hi", "stream_format": "audio", "response_format": "pcm"}).mode == "audio"
    assert check({"input": "hi", "stream_format": "sse", "response_format": "pcm"}).mode == "sse"
    assert check({"input": "hi", "stream": True, "response_format": "pcm"}).mode == "sse"
    assert check({"input": "hi", "stream": True, "stream_format": "audio", "response_format": "pcm"}).mode == "audio"
    assert check({"input": "hi"}).response_format == "wav"


def test_sample_rate_is_checked_before_the_model() -> None:
    # serving_speech.py create_speech: _validate_speech_speech_sample_rate, then _check_model.
    error = refused({"input": "", "model": "tts-1", "sample_rate": 8000})
    assert (error.status, error.param) == (400, None)
    error = refused({"input": "", "model": "tts-1"})
    assert error.status == 404 and error.param == "model"


@pytest.mark.parametrize(
    "body",
    [
        {"input": " "},
        {"input": "hi", "sample_rate": 24000},
        {"input": "hi", "stream_format": "audio", "speed": 2.0, "response_format": "pcm"},
        {"input": "hi", "voice": "alloy"},
        {"input": "hi", "word_timestamps": True},
    ],
)
def test_the_servers_own_refusals_are_400_without_a_param(body: dict[str, object]) -> None:
    # create_error_response(ValueError or message): BadRequestError, param None.
    error = refused(body)
    assert (error.status, error.param, error.err_type) == (400, None, None)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi", "voice": {"name": "x"}}, "body.voice"),
        ({"input": "hi", "response_format": "aac"}, "body.response_format"),
        ({"input": "hi", "max_new_tokens": 0}, "body.max_new_tokens"),
        ({"input": "hi", "sample_rate": 0}, "body.sample_rate"),
        ({"input": "hi", "stream_format": "audio", "response_format": "mp3"}, "body"),
        ({}, "body.input"),
    ],
)
def test_body_validation_is_fastapis_400_as_vllm_renders_it(body: dict[str, object], param: str) -> None:
    error = refused(body)
    assert (error.status, error.param, error.err_type) == (400, param, "Bad Request")
    assert error.message.startswith("1 validation error:")


def test_voices_resolve_case_insensitively() -> None:
    assert check({"input": "hi", "voice": "Anna"}, {"anna"}).voice == "anna"
    assert check({"input": "hi", "voice": {"id": "ANNA"}}, {"anna"}).voice == "anna"
    assert check({"input": "hi", "speaker": "anna"}, {"anna"}).voice == "anna"
    assert check({"input": "hi", "voice": "Default"}).voice is None
    assert refused({"input": "hi", "voice": " default "}).message.startswith("Unknown voice ' default '")


def test_non_object_bodies_are_refused() -> None:
    assert refused(["input"]).status == 400


def test_error_body_shape() -> None:
    assert error_body(404, "nope", "model") == {"error": {"message": "nope", "type": "NotFoundError", "param": "model", "code": 404}}
    assert error_body(500, "boom")["error"]["type"] == "InternalServerError"
