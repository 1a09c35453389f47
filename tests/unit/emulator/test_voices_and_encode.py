from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from gateway.emulator.encode import encode_whole, streaming_wav_header, wav_file
from gateway.emulator.errors import WorkerError
from gateway.emulator.ref_audio import probe_audio_seconds
from gateway.emulator.voices import VoiceStore


def tone(seconds: float) -> bytes:
    t = np.arange(int(24000 * seconds)) / 24000
    return (np.sin(2 * np.pi * 200 * t) * 6000).astype("<i2").tobytes()


def test_voices_persist_per_directory(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path / "w1")
    meta = store.add("Anna", wav_file(tone(2)), "audio/wav", 2.0, ref_text="hello")
    assert meta["name"] == "Anna" and meta["ref_text"] == "hello"
    assert store.names() == {"anna"}
    again = VoiceStore(tmp_path / "w1")  # a restarted worker keeps its voices
    assert [v["name"] for v in again.list()] == ["Anna"]
    assert VoiceStore(tmp_path / "w2").names() == set()  # another worker never sees them
    again.delete("ANNA")
    assert VoiceStore(tmp_path / "w1").names() == set()
    with pytest.raises(WorkerError) as caught:
        again.delete("anna")
    assert caught.value.status == 404


@pytest.mark.parametrize("name", ["", "  ", "a/b", "..", "default"])
def test_bad_voice_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(WorkerError):
        VoiceStore(tmp_path).add(name, b"x", "audio/wav", 1.0)


def test_created_at_strictly_increases(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    first = store.add("a", b"x", "audio/wav", 1.0)["created_at"]
    store.delete("a")
    assert store.add("a", b"x", "audio/wav", 1.0)["created_at"] > first


@pytest.mark.parametrize("response_format", ["wav", "flac", "mp3", "opus"])
def test_whole_file_encodes_round_trip(response_format: str) -> None:
    data = encode_whole(tone(1.5), response_format)
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        seconds = sum(frame.samples / frame.sample_rate for frame in container.decode(stream))
    assert seconds == pytest.approx(1.5, abs=0.1)
    assert probe_audio_seconds(data) == pytest.approx(1.5, abs=0.1)


def test_pcm_is_passed_through_and_the_stream_header_is_open_ended() -> None:
    assert encode_whole(b"\1\2" * 10, "pcm") == b"\1\2" * 10
    header = streaming_wav_header()
    assert len(header) == 44 and header[4:8] == b"\xff\xff\xff\xff" and header[40:44] == b"\xff\xff\xff\xff"
    assert probe_audio_seconds(b"not audio") is None
