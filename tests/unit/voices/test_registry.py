import asyncio

import pytest

from gateway.voices.errors import VoiceError
from gateway.voices.registry import Outcome, VoiceRegistry
from gateway.voices.store import VoiceStore
from tests.unit.voices.fake_workers import Fleet
from tests.unit.voices.samples import wav_bytes
from tests.support.deadline import within

A, B, C = "http://w-a:8091", "http://w-b:8091", "http://w-c:8091"


@pytest.fixture
async def fleet():
    fleet = Fleet(A, B, C)
    yield fleet
    await fleet.client.aclose()


@pytest.fixture
def registry(tmp_path, fleet):
    return VoiceRegistry(VoiceStore.in_data_dir(tmp_path), fleet.client, fleet.current, timeout_s=5)


async def test_add_uploads_to_every_worker_with_the_sniffed_type(registry, fleet):
    audio = wav_bytes(2.0)
    result = await registry.add("Narrator", audio, consent="true", ref_text="Hi.", speaker_description="calm")
    assert result.summary() == {"w-a:8091": "uploaded", "w-b:8091": "uploaded", "w-c:8091": "uploaded"}
    for url in (A, B, C):
        entry = fleet[url].voices["narrator"]
        assert entry["name"] == "Narrator" and entry["consent"] == "true"
        assert entry["ref_text"] == "Hi." and entry["speaker_description"] == "calm"
        assert entry["mime_type"] == "audio/wav" and entry["filename"] == "Narrator.wav"
        assert fleet[url].audio["narrator"] == audio


async def test_a_down_worker_never_fails_the_upload_and_gets_it_on_replay(registry, fleet):
    fleet[B].down = True
    result = await registry.add("v1", wav_bytes(), consent="true")
    outcomes = {r.worker_id: r for r in result.workers}
    assert outcomes["w-b:8091"].outcome is Outcome.FAILED and "ConnectError" in outcomes["w-b:8091"].detail
    assert outcomes["w-a:8091"].ok and registry.store.get("v1") is not None

    fleet[B].down = False  # restarted
    report = await registry.replay(B)
    assert report.ok and report.names(Outcome.UPLOADED) == ["v1"]
    assert fleet[B].names() == {"v1"}


async def test_replay_is_idempotent(registry, fleet):
    await registry.add("v1", wav_bytes(), consent="true")
    await registry.add("v2", wav_bytes(1.5), consent="true")
    fleet[C].voices.clear()
    first = await registry.replay(C)
    assert first.names(Outcome.UPLOADED) == ["v1", "v2"]
    fleet[C].calls.clear()
    second = await registry.replay(C)
    assert second.ok and second.names(Outcome.PRESENT) == ["v1", "v2"]
    assert fleet[C].calls == [("GET", "/v1/audio/voices")]  # nothing re-uploaded


async def test_replay_prunes_voices_deleted_while_the_worker_was_down(registry, fleet):
    await registry.add("keep", wav_bytes(), consent="true")
    await registry.add("drop", wav_bytes(), consent="true")
    fleet[A].down = True
    result = await registry.delete("DROP")
    assert {r.worker_id: r.outcome for r in result.workers}["w-a:8091"] is Outcome.FAILED
    assert fleet[B].names() == {"keep"}

    fleet[A].down = False
    report = await registry.replay(A)
    assert report.names(Outcome.DELETED) == ["drop"] and report.names(Outcome.PRESENT) == ["keep"]
    assert fleet[A].names() == {"keep"}


async def test_replay_without_prune_leaves_foreign_voices(tmp_path, fleet):
    registry = VoiceRegistry(VoiceStore.in_data_dir(tmp_path), fleet.client, fleet.current, prune=False)
    fleet[A].plant("theirs", 1234)
    assert (await registry.replay(A)).ok
    assert fleet[A].names() == {"theirs"}


async def test_replay_replaces_a_stale_copy(registry, fleet):
    voice = (await registry.add("v", wav_bytes(2.0), consent="true")).voice
    fleet[A].voices.clear()
    fleet[A].plant("V", voice.file_size + 10)  # same name, other audio
    report = await registry.replay(A)
    assert report.names(Outcome.REPLACED) == ["v"]
    assert fleet[A].voices["v"]["file_size"] == voice.file_size


async def test_replay_replaces_a_copy_with_another_transcript(registry, fleet):
    voice = (await registry.add("v", wav_bytes(), consent="true", ref_text="new words")).voice
    fleet[A].plant("v", voice.file_size, ref_text="old words")
    assert (await registry.replay(A)).names(Outcome.REPLACED) == ["v"]
    assert fleet[A].voices["v"]["ref_text"] == "new words"


async def test_add_over_a_stale_worker_copy_replaces_it(registry, fleet):
    fleet[A].plant("v", 99)
    result = await registry.add("v", wav_bytes(), consent="true")
    assert {r.worker_id: r.outcome for r in result.workers}["w-a:8091"] is Outcome.REPLACED
    assert fleet[A].voices["v"]["file_size"] == result.voice.file_size


async def test_add_when_the_worker_already_has_it(registry, fleet):
    audio = wav_bytes()
    fleet[A].plant("v", len(audio))
    result = await registry.add("v", audio, consent="true")
    assert {r.worker_id: r.outcome for r in result.workers}["w-a:8091"] is Outcome.PRESENT


async def test_user_mistakes_raise_before_any_worker_is_contacted(registry, fleet):
    with pytest.raises(VoiceError, match="not a recognised audio file"):
        await registry.add("v", b"not audio" * 100, consent="true")
    with pytest.raises(VoiceError, match="consent"):
        await registry.add("v", wav_bytes(), consent="false")
    with pytest.raises(VoiceError) as err:
        await registry.delete("nobody")
    assert err.value.status == 404
    assert all(not w.calls for w in fleet.workers.values())


async def test_delete_removes_everywhere_and_404_is_fine(registry, fleet):
    await registry.add("v", wav_bytes(), consent="true")
    fleet[C].voices.clear()
    result = await registry.delete("v")
    assert {r.worker_id: r.outcome.value for r in result.workers} == {
        "w-a:8091": "deleted",
        "w-b:8091": "deleted",
        "w-c:8091": "absent",
    }
    assert registry.store.get("v") is None and not fleet[A].voices


async def test_replay_reports_an_unreachable_worker(registry, fleet):
    fleet[A].down = True
    report = await registry.replay(A)
    assert not report.ok and "cannot list" in report.error


async def test_concurrent_replays_of_different_workers(registry, fleet):
    for i in range(4):
        await registry.add(f"v{i}", wav_bytes(), consent="true")
    for url in (A, B, C):
        fleet[url].voices.clear()
    reports = await asyncio.gather(*(registry.replay(u) for u in (A, B, C)))
    assert all(r.ok and len(r.names(Outcome.UPLOADED)) == 4 for r in reports)
    assert fleet[A].names() == fleet[B].names() == fleet[C].names() == {"v0", "v1", "v2", "v3"}


async def test_a_voice_added_during_a_replay_reaches_the_replaying_worker(registry, fleet):
    # C is starting: not yet routable, so add() does not fan out to it.
    fleet.routable.discard(C)
    fleet[C].list_gate = gate = asyncio.Event()
    replay = asyncio.create_task(registry.replay(C))
    await asyncio.sleep(0)  # replay is now waiting on C's voice list
    await registry.add("late", wav_bytes(), consent="true")
    gate.set()
    report = await replay
    assert report.ok and report.passes == 2
    assert fleet[C].names() == {"late"}


async def test_replay_with_a_stale_listing_and_a_concurrent_add(registry, fleet):
    fleet[A].list_gate = gate = asyncio.Event()
    replay = asyncio.create_task(registry.replay(A))
    await asyncio.sleep(0)  # A's listing (empty) is taken; the answer is held back
    await registry.add("v", wav_bytes(), consent="true")  # uploads to A meanwhile
    gate.set()
    report = await replay
    # The replay's upload is refused as a duplicate, it checks, finds the same voice, keeps it.
    assert report.ok and report.outcomes == {"v": Outcome.PRESENT}
    assert fleet[A].names() == {"v"} and ("DELETE", "/v1/audio/voices/v") not in fleet[A].calls
    assert fleet[A].calls.count(("POST", "/v1/audio/voices")) == 2  # the add's, the replay's refused one


async def test_add_and_delete_of_one_name_are_serialized(registry, fleet):
    audio = wav_bytes()
    await registry.add("v", audio, consent="true")
    deleting = asyncio.create_task(registry.delete("v"))
    adding = asyncio.create_task(registry.add("v", audio, consent="true"))
    await asyncio.gather(deleting, adding, return_exceptions=True)
    # Whatever the order, store and workers agree.
    in_store = registry.store.get("v") is not None
    for url in (A, B, C):
        assert ("v" in fleet[url].names()) == in_store


async def test_a_worker_that_stayed_up_but_missed_a_fan_out_is_reconciled(registry, fleet):
    fleet[A].down = True  # e.g. a timeout: the worker is not restarted, so no replay comes
    await registry.add("v1", wav_bytes(), consent="true")
    fleet[A].down = False
    await registry.add("v2", wav_bytes(), consent="true")  # a later success does not clear it
    assert registry.out_of_step == {A}
    reports = await registry.reconcile()
    assert [r.base_url for r in reports] == [A] and reports[0].ok
    assert fleet[A].names() == {"v1", "v2"} and registry.out_of_step == frozenset()
    assert await registry.reconcile() == []


async def test_a_fan_out_cut_short_marks_every_target_out_of_step(registry, fleet):
    original, reached = fleet[B].handle, asyncio.Event()

    async def hang(request):
        reached.set()
        await asyncio.sleep(60)
        return await original(request)

    fleet[B].handle = hang
    adding = asyncio.create_task(registry.add("v", wav_bytes(), consent="true"))
    await within(5, reached.wait())  # the fan-out has begun
    adding.cancel()  # the client went away
    with pytest.raises(asyncio.CancelledError):
        await adding
    assert registry.store.get("v") is not None  # durable before the fan-out began
    assert registry.out_of_step == {A, B, C}
    fleet[B].handle = original
    assert all(r.ok for r in await registry.reconcile())
    assert fleet[B].names() == {"v"} and registry.out_of_step == frozenset()


async def test_a_browser_recording_reaches_every_worker_as_wav(registry, fleet):
    # Workers decode samples with soundfile: a WebM/Opus or M4A clip must arrive as WAV.
    from tests.unit.voices.samples import encoded

    result = await registry.add("Browser", encoded("webm", 2.0), consent="true")
    assert all(r.ok for r in result.workers)
    for url in (A, B, C):
        entry = fleet[url].voices["browser"]
        assert entry["mime_type"] == "audio/wav" and entry["filename"] == "Browser.wav"
        assert fleet[url].audio["browser"][:4] == b"RIFF"


async def test_a_restarted_worker_that_restored_its_voices_is_reconciled_not_refilled(registry, fleet):
    # A vllm-omni worker restores uploads from its SPEAKER_SAMPLES_DIR at start: replay
    # lists what it has, keeps what matches, prunes what was deleted meanwhile.
    await registry.add("kept", wav_bytes(), consent="true")
    await registry.add("gone", wav_bytes(1.5), consent="true")
    fleet[A].down = True
    await registry.delete("gone")
    fleet[A].down = False  # back, with both voices restored from its speaker dir
    fleet[A].calls.clear()
    report = await registry.replay(A)
    assert report.ok and report.names(Outcome.PRESENT) == ["kept"] and report.names(Outcome.DELETED) == ["gone"]
    assert ("POST", "/v1/audio/voices") not in fleet[A].calls


async def test_workers_know_each_owners_voice_by_its_worker_name(registry, fleet):
    await registry.add("narrator", wav_bytes(), consent="true", owner="0123456789ab")
    await registry.add("narrator", wav_bytes(1.5), consent="true", owner="ba9876543210")
    assert fleet[A].names() == {"_0123456789ab.narrator", "_ba9876543210.narrator"}
    with pytest.raises(VoiceError) as other:
        await registry.delete("narrator")  # the admin's namespace has none
    assert other.value.status == 404
    result = await registry.delete("narrator", owner="ba9876543210")
    assert result.counts() == {"deleted": 3}
    assert fleet[A].names() == {"_0123456789ab.narrator"}
    fleet[B].voices.clear()
    report = await registry.replay(B)
    assert report.ok and report.names(Outcome.UPLOADED) == ["_0123456789ab.narrator"]
