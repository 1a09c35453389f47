"""Streaming from a real emulator process: chunk pattern, WAV header, SSE framing, openai client."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np
import openai
import pytest

from tests.support.procs import Proc, running_emulator

MODEL = "bosonai/higgs-audio-v3-tts-4b"
TEXT = "The quick brown fox jumps over the lazy dog near the quiet river bank, twice."  # ~5 s


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    with running_emulator(tmp_path_factory.mktemp("stream"), time_scale=0.02) as proc:
        yield proc


def http_chunks(base_url: str, body: dict[str, object], timeout: float = 30.0) -> tuple[int, dict[str, str], list[bytes]]:
    """POST and return the HTTP/1.1 chunks exactly as the server framed them."""
    url = urlparse(base_url)
    payload = json.dumps(body).encode()
    request = (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as sock:
        sock.sendall(request)
        stream = sock.makefile("rb")
        status = int(stream.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := stream.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        assert headers.get("transfer-encoding") == "chunked"
        chunks = []
        while True:
            size = int(stream.readline().split(b";")[0], 16)
            if size == 0:
                break
            chunks.append(stream.read(size))
            assert stream.read(2) == b"\r\n"
        return status, headers, chunks


def expected_frames(emulator: Proc, text: str) -> int:
    """Frames the emulator makes for ``text``: read back from a whole-file pcm request."""
    response = httpx.post(f"{emulator.url}/v1/audio/speech", json={"input": text, "response_format": "pcm"}, timeout=30)
    assert response.status_code == 200
    assert len(response.content) % 1920 == 0
    return len(response.content) // 1920


def test_raw_pcm_stream_has_the_real_chunk_pattern(emulator: Proc) -> None:
    status, headers, chunks = http_chunks(emulator.url, {"input": TEXT, "stream_format": "audio", "response_format": "pcm"})
    assert status == 200
    assert headers["content-type"].startswith("audio/pcm")
    sizes = [len(c) for c in chunks]
    frames = expected_frames(emulator, TEXT)
    assert sizes[0] == 1920  # one 40 ms frame first
    assert all(size == 48000 for size in sizes[1:-1])  # then 25 frames (1 s) at a time
    # The final flush releases the 4 held-back frames: the last chunk holds up to 25 + 4.
    assert 0 < sizes[-1] <= (25 + 4) * 1920
    assert sum(sizes) == frames * 1920
    assert len(sizes) == 1 + (frames - 1 - 4) // 25 + 1  # a 25-frame chunk leaves once 4 more frames exist


def test_streamed_audio_equals_the_whole_file(emulator: Proc) -> None:
    _, _, chunks = http_chunks(emulator.url, {"input": TEXT, "stream_format": "audio", "response_format": "pcm"})
    whole = httpx.post(f"{emulator.url}/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"}, timeout=30)
    assert b"".join(chunks) == whole.content
    samples = np.frombuffer(whole.content, dtype="<i2").astype(np.float64)
    assert np.sqrt(np.mean(samples**2)) > 500  # speech-like level, not silence


def test_raw_wav_stream_starts_with_a_streaming_header(emulator: Proc) -> None:
    status, headers, chunks = http_chunks(emulator.url, {"input": TEXT, "stream_format": "audio", "response_format": "wav"})
    assert status == 200 and headers["content-type"].startswith("audio/wav")
    header = chunks[0]
    assert len(header) == 44
    assert header[:4] == b"RIFF" and header[8:16] == b"WAVEfmt "
    assert int.from_bytes(header[4:8], "little") == 0xFFFFFFFF
    assert int.from_bytes(header[40:44], "little") == 0xFFFFFFFF
    assert int.from_bytes(header[24:28], "little") == 24000
    assert len(chunks[1]) == 1920


def test_sse_framing_and_usage(emulator: Proc) -> None:
    status, headers, chunks = http_chunks(emulator.url, {"input": TEXT, "stream_format": "sse", "response_format": "pcm"})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    text = b"".join(chunks).decode()
    assert text.endswith("\n\n")
    events = [block.split("\n") for block in text.strip("\n").split("\n\n")]
    names = [lines[0] for lines in events]
    assert names[:-1] == ["event: speech.audio.delta"] * (len(events) - 1)
    assert names[-1] == "event: speech.audio.done"
    payloads = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert all(lines[1].startswith("data: {") and len(lines) == 2 for lines in events)
    deltas = [p for p in payloads if p["type"] == "speech.audio.delta"]
    assert all(set(p) == {"type", "audio", "response_format"} and p["response_format"] == "pcm" for p in deltas)
    audio = [base64.b64decode(p["audio"]) for p in deltas]
    assert len(audio[0]) == 1920 and all(len(a) == 48000 for a in audio[1:-1])
    done = payloads[-1]
    usage = done["usage"]
    assert set(done) == {"type", "usage"}
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] and usage["output_tokens"] > 0
    # `stream: true` alone means SSE too.
    _, headers, _ = http_chunks(emulator.url, {"input": "Hi there.", "stream": True, "response_format": "pcm"})
    assert headers["content-type"].startswith("text/event-stream")


def test_sse_wav_sends_the_header_as_its_own_first_delta(emulator: Proc) -> None:
    _, _, chunks = http_chunks(emulator.url, {"input": "Hello there.", "stream_format": "sse", "response_format": "wav"})
    events = b"".join(chunks).decode().split("\n\n")
    first, second = (json.loads(e.split("\n")[1].removeprefix("data: ")) for e in events[:2])
    header = base64.b64decode(first["audio"])
    assert header[:4] == b"RIFF" and len(header) == 44
    assert len(base64.b64decode(second["audio"])) == 1920


def test_same_text_same_audio_unless_the_seed_changes(emulator: Proc) -> None:
    def pcm(extra: dict[str, object]) -> bytes:
        body = {"input": "Deterministic audio, please.", "response_format": "pcm", **extra}
        return httpx.post(f"{emulator.url}/v1/audio/speech", json=body, timeout=30).content

    assert pcm({}) == pcm({}) == pcm({"seed": 42})
    assert pcm({"seed": 7}) != pcm({})


def test_openai_client_streams_pcm(emulator: Proc) -> None:
    client = openai.OpenAI(base_url=f"{emulator.url}/v1", api_key="unused", max_retries=0, timeout=30)
    received = bytearray()
    with client.audio.speech.with_streaming_response.create(
        model=MODEL, voice="default", input=TEXT, response_format="pcm", extra_body={"stream_format": "audio"}
    ) as response:
        assert response.headers["content-type"].startswith("audio/pcm")
        for chunk in response.iter_bytes():
            received += chunk
    assert len(received) == expected_frames(emulator, TEXT) * 1920


def test_openai_client_gets_a_whole_wav_file(emulator: Proc, tmp_path: Path) -> None:
    client = openai.OpenAI(base_url=f"{emulator.url}/v1", api_key="unused", max_retries=0, timeout=30)
    response = client.audio.speech.create(model=MODEL, voice="default", input="Short and sweet.", response_format="wav")
    target = tmp_path / "out.wav"
    response.write_to_file(target)
    data = target.read_bytes()
    assert data[:4] == b"RIFF" and int.from_bytes(data[40:44], "little") == len(data) - 44
