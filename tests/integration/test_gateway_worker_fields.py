"""The released worker's request fields through a real gateway over an emulated worker:
``stream`` gives SSE (raw audio with ``stream_format: "audio"``, and for Boson's model
name), ``references`` clones the voice as ``ref_audio`` does on the worker, ``speaker``
names the voice, ``sample_rate`` comes back at that rate.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import BYTES_PER_SECOND, SHORT_TEXT, decode, worker_pcm
from tests.support.audio import reference_wav
from tests.support.stack import Stack, running_stack

REFERENCE = "data:audio/wav;base64," + base64.b64encode(reference_wav()).decode()
REFERENCE_TEXT = "A few words said in the reference."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("worker-fields"), ll_workers=1, ht_workers=0, time_scale=0.02) as running:
        yield running


@pytest.fixture(scope="module")
def worker_url(stack: Stack) -> str:
    return stack.workers["low_latency"][0].url


def speak(stack: Stack, **body: Any) -> httpx.Response:
    response = httpx.post(f"{stack.url}/v1/audio/speech", json={"input": SHORT_TEXT, **body}, timeout=60)
    assert response.status_code == 200, response.text
    return response


def sse_audio(response: httpx.Response) -> bytes:
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(block[len("data: "):]) for block in response.text.strip().split("\n\n")]
    assert events[-1]["type"] == "speech.audio.done"
    return b"".join(base64.b64decode(event["audio"]) for event in events[:-1])


def test_stream_true_is_sse_and_with_stream_format_audio_raw_audio(stack: Stack, worker_url: str) -> None:
    expected = worker_pcm(worker_url, SHORT_TEXT)
    assert sse_audio(speak(stack, response_format="pcm", stream=True)) == expected
    raw = speak(stack, response_format="pcm", stream=True, stream_format="audio")
    assert raw.headers["content-type"] == "audio/pcm" and raw.content == expected


def test_bosons_model_name_gets_raw_pcm_on_stream_true(stack: Stack, worker_url: str) -> None:
    # What livekit-plugins-boson 0.1.0 sends from SynthesizeStream.
    response = speak(stack, model="higgs-audio-v3-tts", voice="default", response_format="pcm", stream=True)
    assert response.headers["content-type"] == "audio/pcm"
    assert response.content == worker_pcm(worker_url, SHORT_TEXT)


def test_references_clone_the_voice_as_ref_audio_does_on_the_worker(stack: Stack, worker_url: str) -> None:
    cloned = worker_pcm(worker_url, SHORT_TEXT, ref_audio=REFERENCE, ref_text=REFERENCE_TEXT)
    assert cloned != worker_pcm(worker_url, SHORT_TEXT), "the emulator's clone sounds different"
    references = [{"audio_path": REFERENCE, "text": REFERENCE_TEXT}]
    assert speak(stack, response_format="pcm", references=references).content == cloned
    refused = httpx.post(
        f"{stack.url}/v1/audio/speech",
        json={"input": SHORT_TEXT, "references": references * 2},
        timeout=30,
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "'references' only supports a single reference; multi-shot voice clone is not supported"
    )


def test_speaker_names_the_voice(stack: Stack) -> None:
    assert speak(stack, response_format="pcm", speaker="alloy").content == speak(stack, response_format="pcm", voice="alloy").content


@pytest.mark.parametrize(("fmt", "rate"), [("wav", 16_000), ("pcm", 8_000), ("mp3", 44_100), ("flac", 48_000)])
def test_sample_rate_is_made_by_the_gateway(stack: Stack, worker_url: str, fmt: str, rate: int) -> None:
    expected_s = len(worker_pcm(worker_url, SHORT_TEXT)) / BYTES_PER_SECOND
    content = speak(stack, response_format=fmt, sample_rate=rate).content
    if fmt == "pcm":
        got_rate, got_s = rate, len(content) / 2 / rate
    else:
        decoded = decode(content)
        got_rate, got_s = decoded.sample_rate, decoded.duration_s
    assert got_rate == rate
    assert abs(got_s - expected_s) <= 0.1, f"{fmt} at {rate} Hz: {got_s:.3f} s, the worker made {expected_s:.3f} s"
