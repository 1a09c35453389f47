"""Gateway core, the error surface: every client mistake is an OpenAI envelope with the
right status, a message that says what to fix and the offending ``param``; readiness
tells an orchestrator which pool cannot serve.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import set_faults, speech_body, wait_until
from tests.support.stack import Stack, running_stack

MAX_BODY = 64 * 1024
BODY = speech_body()
JSON = {"content-type": "application/json"}

# name -> (request kwargs, expected param, words the message must contain)
BAD_REQUESTS: dict[str, tuple[dict[str, Any], str | None, tuple[str, ...]]] = {
    "bad_json": ({"content": b'{"model": "tts-1", "input": ', "headers": JSON}, None, ("not valid JSON",)),
    "not_an_object": ({"json": ["tts-1"]}, None, ("JSON object",)),
    "empty_body": ({"content": b"", "headers": JSON}, None, ("empty",)),
    "missing_input": ({"json": {"model": "tts-1", "voice": "alloy"}}, "input", ("Missing", "input")),
    # model and voice may be left out, as on the worker (docs/clients.md).
    "empty_input": ({"json": {**BODY, "input": ""}}, "input", ("input",)),
    "blank_input": ({"json": {**BODY, "input": "  \n "}}, "input", ("input",)),
    "too_long_input": ({"json": {**BODY, "input": "a" * 4097}}, "input", ("4096",)),
    "speed_too_high": ({"json": {**BODY, "speed": 4.5}}, "speed", ("speed", "4")),
    "speed_too_low": ({"json": {**BODY, "speed": 0.1}}, "speed", ("speed", "0.25")),
    "speed_not_a_number": ({"json": {**BODY, "speed": "fast"}}, "speed", ("speed", "number")),
    "bad_response_format": ({"json": {**BODY, "response_format": "ogg"}}, "response_format", ("mp3", "opus", "pcm")),
    "bad_stream_format": ({"json": {**BODY, "stream_format": "chunks"}}, "stream_format", ("audio", "sse")),
    "unknown_field": ({"json": {**BODY, "temperature": 0.7}}, "temperature", ("Unknown field", "temperature")),
    "voice_wrong_type": ({"json": {**BODY, "voice": 42}}, "voice", ("voice", "string")),
    "voice_object_without_id": ({"json": {**BODY, "voice": {"name": "x"}}}, "voice", ("voice", "id")),
    "unknown_voice": ({"json": {**BODY, "voice": "nobody-here"}}, "voice", ("nobody-here", "POST /v1/audio/voices")),
    "bad_sla_class": ({"json": BODY, "headers": {"x-sla-class": "urgent"}}, "x-sla-class", ("latency", "balanced", "throughput")),
    "bad_ttfp_budget": ({"json": BODY, "headers": {"x-sla-ttfp-ms": "soon"}}, "x-sla-ttfp-ms", ("milliseconds",)),
    "negative_ttfp_budget": ({"json": BODY, "headers": {"x-sla-ttfp-ms": "-5"}}, "x-sla-ttfp-ms", ("milliseconds",)),
    "seed_past_int64": ({"json": {**BODY, "seed": 2**63}}, "seed", ("seed",)),
    "sample_rate_not_carried": ({"json": {**BODY, "sample_rate": 7000}}, "sample_rate", ("sample_rate", "16000")),
    "two_references": (
        {"json": {**BODY, "references": [{"audio_path": "data:audio/wav;base64,AA=="}] * 2}},
        "references",
        ("single reference",),
    ),
    # Bounded by the profiles' Stage 0 max_model_len (8192), not by the default max_tokens.
    "too_many_new_tokens": ({"json": {**BODY, "max_new_tokens": 99_999}}, "max_new_tokens", ("at most 8192",)),
    # Fewer than the model's 8 codebooks give no audio (the worker would answer an empty 200).
    "too_few_new_tokens": ({"json": {**BODY, "max_new_tokens": 7}}, "max_new_tokens", ("at least 8",)),
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    extra = {"server": {"max_body_bytes": MAX_BODY}}
    with running_stack(tmp_path_factory.mktemp("errors"), 1, 1, time_scale=0.02, extra=extra) as running:
        yield running


def assert_envelope(response: httpx.Response, status: int, param: str | None, words: tuple[str, ...] = ()) -> dict[str, Any]:
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {response.text}"
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    # OpenAI's types: every client mistake is an invalid_request_error (docs/errors.md).
    assert error["type"] == ("invalid_request_error" if status < 500 and status != 429 else error["type"])
    assert error["param"] == param, error
    for word in words:
        assert word.lower() in error["message"].lower(), f"{word!r} not in {error['message']!r}"
    return error


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_input_is_a_400_envelope_naming_the_param(stack: Stack, case: str) -> None:
    kwargs, param, words = BAD_REQUESTS[case]
    response = httpx.post(f"{stack.url}/v1/audio/speech", timeout=30, **kwargs)
    assert_envelope(response, 400, param, words)


def test_unknown_model_is_404_on_param_model(stack: Stack) -> None:
    response = httpx.post(f"{stack.url}/v1/audio/speech", json={**BODY, "model": "gpt-9"}, timeout=30)
    error = assert_envelope(response, 404, "model", ("gpt-9", "higgs-audio-v3-tts-4b"))
    assert error["type"] == "invalid_request_error" and error["code"] == "model_not_found"


def test_wrong_content_type_is_415(stack: Stack) -> None:
    response = httpx.post(
        f"{stack.url}/v1/audio/speech", content=json.dumps(BODY), headers={"content-type": "text/plain"}, timeout=30
    )
    assert_envelope(response, 415, None, ("application/json",))


def test_oversized_body_is_413_declared_or_streamed(stack: Stack) -> None:
    big = json.dumps({**BODY, "input": "a" * (MAX_BODY + 10)}).encode()
    declared = httpx.post(f"{stack.url}/v1/audio/speech", content=big, headers=JSON, timeout=30)
    assert_envelope(declared, 413, None, (str(MAX_BODY),))

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while reading
        for start in range(0, len(big), 8192):
            yield big[start : start + 8192]

    streamed = httpx.post(f"{stack.url}/v1/audio/speech", content=chunks(), headers=JSON, timeout=30)
    assert_envelope(streamed, 413, None, (str(MAX_BODY),))


def test_unknown_route_is_a_404_envelope(stack: Stack) -> None:
    response = httpx.get(f"{stack.url}/v1/does-not-exist", timeout=10)
    error = assert_envelope(response, 404, None)
    assert error["type"] == "invalid_request_error" and error["code"] == "not_found"


def test_ready_names_the_pool_that_cannot_serve(stack: Stack) -> None:
    ready = httpx.get(f"{stack.url}/ready", timeout=10)
    assert ready.status_code == 200, ready.text
    assert ready.json()["routable_workers"] == {"low_latency": 1, "high_throughput": 1}
    assert ready.json()["status"] == "ready" and ready.json()["degraded"] is False

    ht = stack.workers["high_throughput"][0].url
    set_faults(ht, unhealthy=True)
    try:
        # Consecutive failed probes eject the only high-throughput worker: still ready
        # (low-latency serves every class), but degraded, naming the empty pool.
        degraded = wait_until(
            lambda: (r := httpx.get(f"{stack.url}/ready", timeout=10)).json()["degraded"] and r,
            timeout=30,
            message="/ready should say degraded once high_throughput has no routable worker",
        )
        assert degraded.status_code == 200, degraded.text
        body = degraded.json()
        assert body["status"] == "degraded" and body["empty_pools"] == ["high_throughput"], body
        assert body["routable_workers"] == {"low_latency": 1, "high_throughput": 0}, body
        assert set(body["empty_since"]) == {"high_throughput"} and body["empty_for_s"]["high_throughput"] >= 0
        # The strict question (every pool) is answered 503 with the same body.
        strict = httpx.get(f"{stack.url}/ready?require=every_pool", timeout=10)
        assert strict.status_code == 503 and strict.json()["status"] == "not_ready", strict.text
        bad = httpx.get(f"{stack.url}/ready?require=most", timeout=10)
        assert_envelope(bad, 400, "require")
        # The other pool still serves.
        speech = httpx.post(f"{stack.url}/v1/audio/speech", json={**BODY, "response_format": "pcm"}, timeout=30)
        assert speech.status_code == 200 and speech.headers["x-gateway-pool"] == "low_latency"
    finally:
        set_faults(ht, clear=True)
    wait_until(
        lambda: httpx.get(f"{stack.url}/ready?require=every_pool", timeout=10).status_code == 200,
        timeout=30,
        message="/ready back to 200 (every pool) once the worker is healthy again",
    )
    assert httpx.get(f"{stack.url}/ready", timeout=10).json()["degraded"] is False
