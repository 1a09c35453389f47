"""Gateway core, the audio path end to end: a real gateway in front of real emulated workers.

Every format the client may ask for decodes to the audio the worker produced; SSE frames
reassemble to the same bytes; the official ``openai`` client works streaming and not;
``speed`` stretches the audio; the response headers clients and proxies rely on are there.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.integration.conftest import BYTES_PER_SECOND, SHORT_TEXT, decode, speech_body, worker_pcm
from tests.support.stack import Stack, running_stack

CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
# Encoder delay and padding (mp3 frames of 576 samples, AAC priming of 1024) lengthen a
# lossy clip by a few tens of milliseconds; lossless formats must match to the sample.
CODEC_TOLERANCE_S = {"mp3": 0.1, "aac": 0.1, "opus": 0.1, "flac": 0.0, "wav": 0.0}
POOLS = {"low_latency", "high_throughput"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("audio"), ll_workers=1, ht_workers=1, time_scale=0.02) as running:
        yield running


@pytest.fixture(scope="module")
def reference_pcm(stack: Stack) -> bytes:
    """What a worker streams for SHORT_TEXT with the default seed: the audio every format must carry."""
    pcm = worker_pcm(stack.workers["low_latency"][0].url, SHORT_TEXT)
    assert pcm and len(pcm) % 2 == 0
    # The emulator is deterministic given text and seed: the other pool's worker agrees.
    assert worker_pcm(stack.workers["high_throughput"][0].url, SHORT_TEXT) == pcm
    return pcm


def post_speech(stack: Stack, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    response = httpx.post(f"{stack.url}/v1/audio/speech", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response


def assert_stream_headers(response: httpx.Response) -> None:
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-gateway-pool"] in POOLS
    assert response.headers["x-gateway-route-reason"]


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_format_decodes_to_the_workers_audio(stack: Stack, reference_pcm: bytes, fmt: str) -> None:
    response = post_speech(stack, speech_body(response_format=fmt))
    assert response.headers["content-type"] == CONTENT_TYPES[fmt]
    assert_stream_headers(response)
    expected_s = len(reference_pcm) / BYTES_PER_SECOND
    if fmt == "pcm":
        assert response.content == reference_pcm, "raw PCM must be the worker's bytes, unchanged"
        return
    if fmt == "wav":
        header = response.content[:44]
        assert header[:4] == b"RIFF" and header[8:12] == b"WAVE"
        # A streamed WAV cannot know its length: both size fields say "unknown".
        assert header[4:8] == b"\xff\xff\xff\xff", f"RIFF size {header[4:8].hex()}"
        assert header[40:44] == b"\xff\xff\xff\xff", f"data size {header[40:44].hex()}"
        assert response.content[44:] == reference_pcm, "one header, then exactly the worker's PCM"
    decoded = decode(response.content)
    assert decoded.channels == 1
    # Opus always decodes at 48 kHz; the duration is what has to match then.
    assert decoded.sample_rate == (48_000 if fmt == "opus" else 24_000), decoded
    tolerance = CODEC_TOLERANCE_S[fmt]
    assert abs(decoded.duration_s - expected_s) <= tolerance + 1e-9, (
        f"{fmt}: decoded {decoded.duration_s:.3f} s, worker produced {expected_s:.3f} s"
    )


def test_request_id_is_echoed_or_generated(stack: Stack) -> None:
    mine = f"test-{uuid.uuid4().hex}"
    echoed = post_speech(stack, speech_body(response_format="pcm"), headers={"x-request-id": mine})
    assert echoed.headers["x-request-id"] == mine
    first = post_speech(stack, speech_body(response_format="pcm")).headers.get("x-request-id")
    second = post_speech(stack, speech_body(response_format="pcm")).headers.get("x-request-id")
    assert first and second and first != second, "a fresh id per request when the client sends none"
    # Errors carry it too.
    error = httpx.post(f"{stack.url}/v1/audio/speech", json={}, headers={"x-request-id": mine}, timeout=10)
    assert error.status_code == 400 and error.headers["x-request-id"] == mine


def parse_sse(text: str) -> list[dict[str, Any]]:
    assert text.endswith("\n\n"), "every event ends with a blank line"
    events = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: ") and "\n" not in block, f"not one data line: {block[:80]!r}"
        events.append(json.loads(block[len("data: "):]))
    return events


@pytest.mark.parametrize("fmt", ["pcm", "mp3", "wav"])
def test_sse_events_reassemble_to_the_same_audio(stack: Stack, reference_pcm: bytes, fmt: str) -> None:
    response = post_speech(stack, speech_body(response_format=fmt, stream_format="sse"))
    assert response.headers["content-type"].startswith("text/event-stream")
    assert_stream_headers(response)
    events = parse_sse(response.text)
    types = [event["type"] for event in events]
    assert types[-1] == "speech.audio.done" and types.count("speech.audio.done") == 1, types
    assert set(types[:-1]) == {"speech.audio.delta"}, types
    usage = events[-1]["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    audio = b"".join(base64.b64decode(event["audio"]) for event in events[:-1])
    plain = post_speech(stack, speech_body(response_format=fmt)).content
    if fmt == "mp3":
        # The same encoder settings on the same PCM: the SSE payload is the plain file.
        assert decode(audio).samples == decode(plain).samples
    else:
        assert audio == plain
    if fmt == "pcm":
        assert audio == reference_pcm


def test_openai_client_streaming_and_not(stack: Stack, reference_pcm: bytes) -> None:
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0, timeout=60)
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=SHORT_TEXT, response_format="pcm"
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        chunks = list(response.iter_bytes())
    assert b"".join(chunks) == reference_pcm

    whole = client.audio.speech.create(model="tts-1", voice="alloy", input=SHORT_TEXT)
    decoded = decode(whole.content)
    assert decoded.codec.startswith("mp3"), f"the default format is mp3, got {decoded.codec}"
    assert abs(decoded.duration_s - len(reference_pcm) / BYTES_PER_SECOND) <= CODEC_TOLERANCE_S["mp3"]

    ids = {model.id for model in client.models.list()}
    assert {"tts-1", "bosonai/higgs-audio-v3-tts-4b"} <= ids, ids


@pytest.mark.parametrize("speed", [2.0, 0.5])
def test_speed_scales_the_duration(stack: Stack, reference_pcm: bytes, speed: float) -> None:
    response = post_speech(stack, speech_body(response_format="pcm", speed=speed))
    got_s = len(response.content) / BYTES_PER_SECOND
    want_s = len(reference_pcm) / BYTES_PER_SECOND / speed
    assert abs(got_s - want_s) <= 0.05 * want_s, f"speed {speed}: {got_s:.3f} s, expected ~{want_s:.3f} s"
    assert response.content != reference_pcm[: len(response.content)], "the audio was stretched, not cut"


def test_a_clip_longer_than_82_s_streams_through(stack: Stack) -> None:
    """``max_new_tokens`` past Stage 0's default 2048 (~82 s): bounded by the workers'
    max_model_len, not by a fixed cap, and streamed like any other clip."""
    text = " ".join([SHORT_TEXT] * 27)  # ~125 s of speech at ~15 characters per second
    body = speech_body(text, response_format="pcm", max_new_tokens=2600)
    response = post_speech(stack, body, headers={"x-sla-class": "throughput"})
    assert len(response.content) == (2600 - 8) * BYTES_PER_SECOND // 25, "every token the budget allows, as audio"
