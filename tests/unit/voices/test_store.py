import io
import json
import os
import time
import wave

import pytest

from gateway.config import VoicesConfig
from gateway.voices import store as store_module
from gateway.voices.errors import VoiceError
from gateway.voices.store import VoiceStore
from tests.unit.voices.samples import encoded, wav_bytes


@pytest.fixture
def store(tmp_path):
    return VoiceStore.in_data_dir(tmp_path)


def test_add_writes_audio_and_meta_and_survives_restart(tmp_path, store):
    audio = wav_bytes(2.0)
    voice = store.add(
        "Narrator", audio, consent="true", ref_text=" Hello there. ", speaker_description="warm"
    )
    directory = tmp_path / "voices" / "Narrator"
    assert (directory / "audio.wav").read_bytes() == audio
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["name"] == "Narrator" and meta["mime_type"] == "audio/wav"
    assert meta["ref_text"] == "Hello there." and meta["speaker_description"] == "warm"
    assert voice.file_size == len(audio) and voice.duration_s == pytest.approx(2.0, abs=0.01)

    reopened = VoiceStore.in_data_dir(tmp_path)
    assert reopened.list() == [voice]
    assert reopened.get("narrator") == voice  # case-insensitive, like workers
    assert reopened.read_audio(voice) == audio


@pytest.mark.parametrize("container", ["webm", "ipod", "adts", "mp3", "flac", "ogg"])
def test_every_upload_is_stored_as_24k_mono_wav(store, container):
    # Workers decode samples with soundfile, which reads no WebM, M4A/MP4 or AAC: the
    # store keeps (and the registry forwards) a WAV every worker reads.
    voice = store.add("m", encoded(container, 2.0), consent="yes")
    assert (voice.ext, voice.mime_type, voice.sample_rate, voice.channels) == ("wav", "audio/wav", 24_000, 1)
    audio = store.read_audio(voice)
    assert audio[:4] == b"RIFF" and voice.file_size == len(audio)
    with wave.open(io.BytesIO(audio)) as clip:
        assert (clip.getframerate(), clip.getnchannels(), clip.getsampwidth()) == (24_000, 1, 2)
        assert clip.getnframes() / 24_000 == pytest.approx(2.0, abs=0.1)


def test_the_voice_count_is_capped_before_anything_is_stored(tmp_path):
    store = VoiceStore.in_data_dir(tmp_path, VoicesConfig(max_voices=2))
    store.add("a", wav_bytes(), consent="1")
    store.add("b", wav_bytes(), consent="1")
    with pytest.raises(VoiceError) as err:
        store.add("c", wav_bytes(), consent="1")
    assert (err.value.status, err.value.code) == (400, "too_many_voices")
    assert [v.name for v in store.list()] == ["a", "b"]
    assert VoicesConfig().max_voices == 1000  # a worker's SPEAKER_MAX_UPLOADED default


def test_duration_limits_cannot_exceed_what_workers_accept():
    with pytest.raises(ValueError):
        VoicesConfig(max_duration_s=60)
    with pytest.raises(ValueError):
        VoicesConfig(min_duration_s=0.5)


def test_duplicate_names_conflict_case_insensitively(store):
    store.add("bob", wav_bytes(), consent="1")
    with pytest.raises(VoiceError) as err:
        store.add("BOB", wav_bytes(), consent="1")
    assert err.value.status == 409


@pytest.mark.parametrize("consent", ["", "  ", "false", "No", "0", "off", None])
def test_consent_is_required(store, consent):
    with pytest.raises(VoiceError) as err:
        store.add("v", wav_bytes(), consent=consent)
    assert err.value.param == "consent"
    assert store.list() == []


def test_consent_record_ids_are_kept(store):
    assert store.add("v", wav_bytes(), consent="consent_abc123").consent == "consent_abc123"


def test_size_limit(tmp_path):
    store = VoiceStore(tmp_path / "v", VoicesConfig(max_upload_bytes=1000))
    with pytest.raises(VoiceError) as err:
        store.add("big", wav_bytes(), consent="true")
    assert err.value.status == 413 and err.value.param == "audio_sample"


def test_non_audio_is_refused_and_nothing_is_written(tmp_path, store):
    with pytest.raises(VoiceError, match="not a recognised audio file"):
        store.add("fake", b"#!/bin/sh\necho not audio\n" * 20, consent="true")
    assert os.listdir(tmp_path / "voices") == []


@pytest.mark.parametrize("name", ["../escape", "a/b", ".x", "..", "default", "alloy"])
def test_path_tricks_and_reserved_names_never_touch_disk(tmp_path, store, name):
    with pytest.raises(VoiceError):
        store.add(name, wav_bytes(), consent="true")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["voices"]


def test_alias_keys_are_reserved(tmp_path):
    store = VoiceStore(tmp_path, VoicesConfig(aliases={"narrator": None}))
    with pytest.raises(VoiceError, match="reserved"):
        store.add("Narrator", wav_bytes(), consent="true")


def test_overlong_ref_text_is_refused(store):
    with pytest.raises(VoiceError) as err:
        store.add("v", wav_bytes(), consent="true", ref_text="x" * 5000)
    assert err.value.param == "ref_text"


def test_delete(tmp_path, store):
    voice = store.add("gone", wav_bytes(), consent="true")
    assert store.delete("GONE") == voice
    assert store.get("gone") is None and store.delete("gone") is None
    assert os.listdir(tmp_path / "voices") == []
    assert VoiceStore.in_data_dir(tmp_path).list() == []


def test_crash_before_rename_leaves_no_voice(tmp_path, store, monkeypatch):
    def crash(src, dst):
        raise OSError(5, "simulated crash")

    monkeypatch.setattr(store_module.os, "rename", crash)
    with pytest.raises(OSError):
        store.add("half", wav_bytes(), consent="true")
    monkeypatch.undo()
    assert store.get("half") is None
    assert os.listdir(tmp_path / "voices") == []  # staging cleaned up


def test_leftover_staging_dir_is_ignored_then_swept(tmp_path, store):
    store.add("real", wav_bytes(), consent="true")
    # What a crash between writing and renaming leaves: a complete-looking hidden voice.
    leftover = tmp_path / "voices" / ".tmp-deadbeef"
    leftover.mkdir()
    (leftover / "audio.wav").write_bytes(wav_bytes())
    (leftover / "meta.json").write_text((tmp_path / "voices" / "real" / "meta.json").read_text())
    trash = tmp_path / "voices" / ".trash-cafe"
    trash.mkdir()

    young = VoiceStore.in_data_dir(tmp_path)
    assert [v.name for v in young.list()] == ["real"]
    assert leftover.exists()  # may be another replica's write in progress: kept, still invisible

    old = time.time() - 2 * store_module.LEFTOVER_MIN_AGE_S
    for path in (leftover, trash):
        os.utime(path, (old, old))
    VoiceStore.in_data_dir(tmp_path)
    assert not leftover.exists() and not trash.exists()


def test_corrupt_entries_are_ignored(tmp_path, store):
    good = store.add("good", wav_bytes(), consent="true")
    root = tmp_path / "voices"
    (root / "nometa").mkdir()
    (root / "badjson").mkdir()
    (root / "badjson" / "meta.json").write_text("{not json")
    truncated = store.add("trunc", wav_bytes(), consent="true")
    with open(root / "trunc" / truncated.filename, "r+b") as f:
        f.truncate(100)
    renamed = store.add("orig", wav_bytes(), consent="true")
    (root / "orig").rename(root / "other")  # meta.json no longer matches its directory
    store.add("linked", wav_bytes(), consent="true")
    (root / "linked" / "audio.wav").unlink()
    (root / "linked" / "audio.wav").symlink_to(root / "good" / "audio.wav")
    (root / "afile").write_text("x")

    assert VoiceStore.in_data_dir(tmp_path).list() == [good]
    assert renamed.name == "orig"


def test_a_second_store_on_the_same_directory_sees_changes(tmp_path):
    a = VoiceStore.in_data_dir(tmp_path)
    b = VoiceStore.in_data_dir(tmp_path)
    assert b.list() == []
    voice = a.add("shared", wav_bytes(), consent="true")
    assert b.get("shared") == voice
    a.delete("shared")
    assert b.get("shared") is None


def test_a_voice_stored_in_its_upload_container_is_converted_to_wav_at_start(tmp_path):
    # Stored by an earlier version that kept the browser's WebM: no worker could read it.
    directory = tmp_path / "voices" / "Legacy"
    directory.mkdir(parents=True)
    webm = encoded("webm", 2.0)
    (directory / "audio.webm").write_bytes(webm)
    meta = {
        "name": "Legacy", "created_at": 1, "mime_type": "audio/webm", "ext": "webm", "file_size": len(webm),
        "duration_s": 2.0, "sample_rate": 48000, "channels": 1, "consent": "yes", "ref_text": None,
        "speaker_description": None,
    }  # fmt: skip
    (directory / "meta.json").write_text(json.dumps(meta))
    voice = VoiceStore.in_data_dir(tmp_path).get("legacy")
    assert voice is not None and (voice.ext, voice.mime_type, voice.sample_rate) == ("wav", "audio/wav", 24_000)
    assert sorted(p.name for p in directory.iterdir()) == ["audio.wav", "meta.json"]
    assert (directory / "audio.wav").read_bytes()[:4] == b"RIFF"
    assert VoiceStore.in_data_dir(tmp_path).get("legacy") == voice  # idempotent


KEY_A, KEY_B = "0123456789ab", "ba9876543210"


def test_each_owner_has_its_own_namespace_on_disk(tmp_path, store):
    admins = store.add("narrator", wav_bytes(), consent="true")
    alices = store.add("Narrator", wav_bytes(), consent="rec-a", owner=KEY_A)
    bobs = store.add("narrator", wav_bytes(), consent="rec-b", owner=KEY_B)
    assert (admins.worker_name, alices.worker_name, bobs.worker_name) == (
        "narrator", f"_{KEY_A}.Narrator", f"_{KEY_B}.narrator"
    )  # fmt: skip
    assert {p.name for p in (tmp_path / "voices").iterdir()} == {v.worker_name for v in (admins, alices, bobs)}
    assert store.find(KEY_A, "NARRATOR") == alices and store.find(KEY_B, "narrator") == bobs
    assert store.owned_by(KEY_A) == [alices]
    with pytest.raises(VoiceError) as duplicate:
        store.add("narrator", wav_bytes(), consent="true", owner=KEY_A)
    assert duplicate.value.status == 409  # within one owner only
    assert store.delete(bobs.worker_name) == bobs and store.find(KEY_A, "narrator") == alices
    reopened = VoiceStore.in_data_dir(tmp_path)
    assert {(v.owner, v.name) for v in reopened.list()} == {("admin", "narrator"), (KEY_A, "Narrator")}


def test_a_voice_stored_before_owners_is_the_admins(tmp_path, store):
    voice = store.add("legacy", wav_bytes(), consent="true")
    meta_path = tmp_path / "voices" / "legacy" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["owner"]  # what a gateway without owners wrote
    meta_path.write_text(json.dumps(meta))
    os.utime(tmp_path / "voices")
    (reopened,) = VoiceStore.in_data_dir(tmp_path).list()
    assert reopened == voice and reopened.owner == "admin" and reopened.worker_name == "legacy"


def test_the_owner_quota_counts_only_the_owners_voices(tmp_path):
    store = VoiceStore.in_data_dir(tmp_path, VoicesConfig(max_voices=3))
    store.add("a1", wav_bytes(), consent="true", owner=KEY_A, owner_limit=1)
    with pytest.raises(VoiceError) as over:
        store.add("a2", wav_bytes(), consent="true", owner=KEY_A, owner_limit=1)
    assert over.value.code == "too_many_voices" and "your tier" in over.value.message
    store.add("b1", wav_bytes(), consent="true", owner=KEY_B, owner_limit=1)
    store.add("admin1", wav_bytes(), consent="true")
    with pytest.raises(VoiceError) as full:  # the global max still bounds them all
        store.add("b2", wav_bytes(), consent="true", owner=KEY_B, owner_limit=5)
    assert "the most a worker holds" in full.value.message


@pytest.mark.parametrize("name", ["_0123456789ab.x", "_admin.x"])
def test_no_client_name_looks_like_another_owners_worker_name(store, name):
    with pytest.raises(VoiceError):
        store.add(name, wav_bytes(), consent="true")
