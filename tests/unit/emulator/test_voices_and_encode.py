from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from gateway.emulator.encode import encode_whole, streaming_wav_header, wav_file
from gateway.emulator.errors import WorkerError
from gateway.emulator.ref_audio import probe_audio_seconds
from gateway.emulator.voices import DEFAULT_MAX_UPLOADED, VoiceStore, upload_mime_type, validate_voice_name
from tests.unit.voices.samples import encoded


def tone(seconds: float) -> bytes:
    t = np.arange(int(24000 * seconds)) / 24000
    return (np.sin(2 * np.pi * 200 * t) * 6000).astype("<i2").tobytes()


def _seconds(sample: bytes) -> float | None:
    return probe_audio_seconds(sample)


def add(store: VoiceStore, name: str, sample: bytes, **kwargs: str) -> dict[str, object]:
    return store.add(name, sample, "audio/wav", "consent-1", _seconds, **kwargs)


def test_voices_persist_per_directory(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path / "w1")
    meta = add(store, "Anna", wav_file(tone(2)), ref_text="hello")
    assert meta["name"] == "Anna" and meta["ref_text"] == "hello"
    assert store.names() == {"anna"}
    again = VoiceStore(tmp_path / "w1")  # a restarted worker restores its voices
    assert again.restored == 1
    assert [v["name"] for v in again.list()] == ["Anna"]
    assert VoiceStore(tmp_path / "w2").names() == set()  # another worker never sees them
    again.delete("ANNA")
    assert VoiceStore(tmp_path / "w1").names() == set()
    with pytest.raises(WorkerError) as caught:
        again.delete("anna")
    assert caught.value.status == 404


def test_listing_has_the_real_fields_and_default(tmp_path: Path) -> None:
    # vllm_omni/entrypoints/openai/api_server.py: list_voices
    store = VoiceStore(tmp_path)
    add(store, "Anna", wav_file(tone(2)))
    assert store.voice_list() == ["anna", "default"]
    (entry,) = store.list()
    assert entry == {
        "name": "Anna", "consent": "consent-1", "created_at": entry["created_at"], "file_size": len(wav_file(tone(2))),
        "mime_type": "audio/wav", "embedding_source": "audio", "embedding_dim": None,
    }  # fmt: skip


@pytest.mark.parametrize("name", ["", "  ", "a/b", "..", "x\\y"])
def test_bad_voice_names(name: str) -> None:
    with pytest.raises(WorkerError):
        validate_voice_name(name)


def test_re_upload_overwrites(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    first = add(store, "a", wav_file(tone(2)))
    second = add(store, "A", wav_file(tone(3)), ref_text="new")
    assert second["created_at"] > first["created_at"]
    assert [v["name"] for v in store.list()] == ["A"] and store.list()[0]["ref_text"] == "new"
    assert len(list(tmp_path.glob("*.json"))) == 1


@pytest.mark.parametrize("container", ["webm", "ipod", "adts"])
def test_what_soundfile_cannot_read_is_refused(tmp_path: Path, container: str) -> None:
    # serving_speech.py: upload_voice decodes with soundfile (no AAC, MP4/M4A or WebM reader)
    store = VoiceStore(tmp_path)
    with pytest.raises(WorkerError) as caught:
        add(store, "v", encoded(container, 2.0))
    assert caught.value.status == 400 and "Could not decode" in caught.value.message
    assert store.names() == set() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("container", ["mp3", "flac", "ogg"])
def test_what_soundfile_reads_is_accepted(tmp_path: Path, container: str) -> None:
    assert add(VoiceStore(tmp_path), "v", encoded(container, 2.0))["file_size"] > 0


@pytest.mark.parametrize(("seconds", "word"), [(0.5, "short"), (31.0, "long")])
def test_clip_must_last_1_to_30_seconds(tmp_path: Path, seconds: float, word: str) -> None:
    with pytest.raises(WorkerError) as caught:
        add(VoiceStore(tmp_path), "v", wav_file(tone(seconds)))
    assert caught.value.status == 400 and f"too {word}" in caught.value.message


def test_the_voice_cap_refuses_new_names_but_not_re_uploads(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path, max_uploaded=2)
    add(store, "a", wav_file(tone(1.5)))
    add(store, "b", wav_file(tone(1.5)))
    with pytest.raises(WorkerError) as caught:
        add(store, "c", wav_file(tone(1.5)))
    assert caught.value.status == 400 and "limit reached (2)" in caught.value.message
    add(store, "b", wav_file(tone(2)))  # the old "b" is evicted first, so it fits
    assert store.names() == {"a", "b"}
    assert VoiceStore(tmp_path).max_uploaded == DEFAULT_MAX_UPLOADED == 1000


def test_upload_mime_types_as_the_real_worker() -> None:
    assert upload_mime_type("audio/webm", "x.webm") == "audio/webm"  # allowed here, refused at decode
    assert upload_mime_type("application/octet-stream", "clip.FLAC") == "audio/flac"
    assert upload_mime_type("application/octet-stream", "clip.bin") == "audio/wav"
    with pytest.raises(WorkerError):
        upload_mime_type("audio/x-m4a", "phone.m4a")


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
