"""A ``data:`` reference costs what its limits allow, not what its sender chose.

Every refusal a data URI can get without decoding comes before any decoding, at a cost
independent of its length (measured here as allocation, deterministic, not as time); a
payload that fits is scanned in slices, never copied whole, in a thread when large; a
speech body no valid request needs is refused as it is read; and a voice session judges
its reference audio once per distinct value, not once per ``session.config``.
"""

from __future__ import annotations

import base64
import json
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.config import AuthConfig, load_config
from gateway.security import data_uri
from gateway.security.errors import RefAudioError
from gateway.security.ref_audio import RefAudioPolicy
from gateway.sessions.outbox import Outbox
from gateway.sessions.session import Session, SessionEnd, SessionLimits
from gateway.sessions.voice import SessionVoices
from gateway.worker.session_protocol import StreamingSpeechSessionConfig
from gateway.types import PoolName
from gateway.voices.store import VoiceStore
from gateway.worker_payload import WorkerPayloads
from tests.support.deadline import until
from tests.unit.sessions.fakes import NullSessionObserver
from tests.unit.upstream.fakes import FakeTransport
from tests.unit.voices.samples import wav_bytes

LIMIT = 10 * 1024 * 1024  # the default auth.ref_audio_max_bytes
HOSTILE_CHARS = 4_000_000
# What a refusal may allocate whatever the value's length: a few short strings.
REFUSAL_BYTES = 64 * 1024

HOSTILE = {
    "semicolons, no comma": "data:" + ";" * HOSTILE_CHARS,
    "many short parameters": "data:audio/wav" + ";ab" * (HOSTILE_CHARS // 3) + ";base64,AAAA",
    "one long parameter": "data:audio/wav;x=" + "a" * HOSTILE_CHARS + ";base64,AAAA",
    "payload over the limit": "data:audio/wav;base64," + "A" * (4 * LIMIT // 3 + 8),
    "payload not whole quads": "data:audio/wav;base64," + "A" * (HOSTILE_CHARS + 1),
}


def data_uri_of(audio: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(audio).decode()


def peak_allocation(call: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        call()
    except RefAudioError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("shape", HOSTILE)
def test_a_hostile_data_uri_is_refused_without_allocating_in_proportion_to_it(shape: str) -> None:
    policy, value = RefAudioPolicy(AuthConfig(ref_audio_max_bytes=LIMIT)), HOSTILE[shape]
    with pytest.raises(RefAudioError):
        policy.check(value)
    # Before: the header split into one string per parameter (0.3-0.6 GB for 15 MB), the
    # payload joined without its whitespace, then decoded.
    assert peak_allocation(lambda: policy.check(value)) < REFUSAL_BYTES


@pytest.mark.parametrize("shape", HOSTILE)
def test_a_hostile_data_uri_is_refused_before_any_decoding(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("decoded a payload that arithmetic alone refuses")

    monkeypatch.setattr(data_uri.binascii, "a2b_base64", no_decoding)
    with pytest.raises(RefAudioError) as refused:
        RefAudioPolicy(AuthConfig(ref_audio_max_bytes=LIMIT)).check(HOSTILE[shape])
    assert refused.value.status == 400 and refused.value.param == "ref_audio"


def test_a_payload_that_is_not_base64_is_refused_at_its_first_bad_slice() -> None:
    policy = RefAudioPolicy(AuthConfig(ref_audio_max_bytes=LIMIT))
    spaced = "data:audio/wav;base64," + "AAA " * (HOSTILE_CHARS // 4)  # the worker refuses whitespace too
    with pytest.raises(RefAudioError, match="not valid base64"):
        policy.check(spaced)
    # Before: the payload split at its whitespace and joined again before decoding.
    assert peak_allocation(lambda: policy.check(spaced)) < 3 * data_uri.SLICE_CHARS


def test_the_header_is_looked_for_only_within_its_cap() -> None:
    policy = RefAudioPolicy(AuthConfig())
    with pytest.raises(RefAudioError, match="header"):
        policy.check("data:audio/wav;x=" + "a" * data_uri.MAX_HEADER_CHARS + ";base64," + base64.b64encode(wav_bytes(0.1)).decode())
    longest = "data:audio/wav;" + "x" * (data_uri.MAX_HEADER_CHARS - len("audio/wav;x;base64")) + ";base64,"
    assert policy.check(longest + base64.b64encode(wav_bytes(0.1)).decode())


def test_a_clip_at_the_limit_is_scanned_in_slices_never_copied_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    audio = wav_bytes(1.0)
    audio += b"\x00" * (LIMIT - len(audio))
    value = data_uri_of(audio)
    policy = RefAudioPolicy(AuthConfig(ref_audio_max_bytes=LIMIT))
    decoded: list[int] = []
    decode = data_uri.binascii.a2b_base64

    def recording_decode(text: str, **kwargs: bool) -> bytes:
        decoded.append(len(text))
        return decode(text, **kwargs)

    monkeypatch.setattr(data_uri.binascii, "a2b_base64", recording_decode)
    assert policy.check(value) == value
    assert decoded and max(decoded) <= data_uri.SNIFF_CHARS  # its head and its last quad, nothing else
    monkeypatch.undo()
    # One slice of text and its decoded bytes at a time; before: the payload joined, then decoded (~24 MB).
    assert peak_allocation(lambda: policy.check(value)) < 3 * data_uri.SLICE_CHARS
    with pytest.raises(RefAudioError, match="larger than"):
        RefAudioPolicy(AuthConfig(ref_audio_max_bytes=LIMIT - 1)).check(value)


@pytest.mark.parametrize(
    "payload, accepted",
    [
        (base64.b64encode(wav_bytes(0.01)).decode(), True),
        ("UklGRg" + "==" + base64.b64encode(wav_bytes(0.01)).decode(), False),  # padding inside
        ("UklG" + "Rg==" + "AAAA" * 4, False),  # padding at a slice's end, more after it
        ("UklG" + "RgAA" + "AA*A" + "AAAA", False),  # a character outside base64 in a later slice
        ("UklG" + "RgAA" + "AAAA" + "AAé=", False),  # non-ASCII
    ],
)
def test_every_slice_is_strict_base64_and_padding_only_ends_the_payload(
    payload: str, accepted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data_uri, "SLICE_CHARS", 8)
    check = lambda: RefAudioPolicy(AuthConfig()).check("data:audio/wav;base64," + payload)
    if accepted:
        check()
    else:
        with pytest.raises(RefAudioError, match="not valid base64"):
            check()


async def test_a_large_payload_is_scanned_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    scan = data_uri.scan

    def recording_scan(uri: data_uri.DataUri, in_thread: bool = False) -> None:
        threads.append(threading.get_ident())
        scan(uri, in_thread)

    monkeypatch.setattr(data_uri, "scan", recording_scan)
    policy = RefAudioPolicy(AuthConfig())
    small, large = data_uri_of(wav_bytes(0.1)), data_uri_of(wav_bytes(6.0))
    assert len(small) < data_uri.THREAD_SCAN_CHARS < len(large)
    assert await policy.accept(small) == small
    assert await policy.accept(large) == large
    assert threads[0] == threading.get_ident() != threads[1]


# ---- the speech body --------------------------------------------------------------

LL_URL, HT_URL = "http://ll.test:1", "http://ht.test:1"


def worker_control(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/health":
        return httpx.Response(200, json={"status": "ok"})
    if request.url.path == "/load":
        return httpx.Response(200, json={"server_load": 0})
    return httpx.Response(200, json={"voices": []})


def speech_body(ref_audio: str) -> bytes:
    return json.dumps({"model": "tts-1", "input": "Hello.", "voice": "alloy", "ref_audio": ref_audio}).encode()


async def test_a_speech_body_no_valid_request_needs_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(self: RefAudioPolicy, value: object) -> str:
        raise AssertionError("judged a ref_audio in a body that should not have been parsed")

    config = load_config(
        overrides={
            "data_dir": str(tmp_path),
            "logging": {"access_log": False},
            "health": {"interval_s": 0.05},
            "pools": {
                "low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": [LL_URL]},
                "high_throughput": {"profile": "higgs_multimodal_qwen3_high_throughput.yaml", "workers": [HT_URL]},
            },
        }
    )
    assert config.server.max_body_bytes > 15_000_000  # the server-wide limit alone lets it in
    hostile = speech_body("data:audio/wav;x=" + "a" * 15_000_000 + ";base64,AAAA")
    app = create_app(
        config,
        transport=FakeTransport({LL_URL: [], HT_URL: []}),
        control_client=httpx.AsyncClient(transport=httpx.MockTransport(worker_control)),
    )
    await app.start()
    try:
        await until(lambda: all(app.fleet.view.routable_count(pool) for pool in PoolName), 10, "both workers routable")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw.test") as client:
            monkeypatch.setattr(RefAudioPolicy, "check", never)
            monkeypatch.setattr(RefAudioPolicy, "accept", never)
            too_big = await client.post("/v1/audio/speech", content=hostile, headers={"content-type": "application/json"})
            monkeypatch.undo()
            near = "data:audio/wav;x=" + "a" * 13_000_000 + ";base64,AAAA"
            header = await client.post("/v1/audio/speech", content=speech_body(near), headers={"content-type": "application/json"})
    finally:
        await app.stop()
    assert too_big.status_code == 413, too_big.text
    assert too_big.json()["error"]["code"] == "payload_too_large"
    # Under the speech limit, the header cap refuses it without reading the rest.
    assert header.status_code == 400, header.text
    assert "header" in header.json()["error"]["message"]


# ---- voice sessions ---------------------------------------------------------------


class CountingPolicy(RefAudioPolicy):
    """The real policy, counting how often a value is judged (either entry point)."""

    def __init__(self) -> None:
        super().__init__(AuthConfig())
        self.judged = 0

    def check(self, value: object) -> str:
        self.judged += 1
        return super().check(value)

    async def accept(self, value: object) -> str:
        self.judged += 1
        return await super().accept(value)


class ScriptedSocket:
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self._messages = [json.dumps(message) for message in messages]
        self.sent: list[Any] = []

    async def receive(self) -> str | None:
        return self._messages.pop(0) if self._messages else None

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def close(self, code: int) -> None:
        pass


class NoSentences:
    """A session that only configures itself never reaches its pipeline."""

    def idle_for(self) -> float:
        return 0.0

    async def close(self) -> None:
        pass


async def test_a_session_judges_its_ref_audio_once_per_distinct_value(tmp_path: Path) -> None:
    config = load_config(overrides={"data_dir": str(tmp_path)})
    policy = CountingPolicy()
    payloads = WorkerPayloads(config.models, config.voices, VoiceStore.in_data_dir(tmp_path), policy)
    first, second = data_uri_of(wav_bytes(0.5)), data_uri_of(wav_bytes(0.6))
    messages = [{"type": "session.config", "ref_audio": first, "ref_text": "Hi."}] * 5
    messages += [{"type": "session.config", "ref_audio": second, "ref_text": "Hi."}, {"type": "session.close"}]
    socket = ScriptedSocket(messages)
    session = Session(
        socket, Outbox(socket), NoSentences(), SessionVoices(payloads), SessionLimits(5.0, 5.0, 1000),  # type: ignore[arg-type]
        lambda: 0.0, NullSessionObserver(),
    )  # fmt: skip
    assert await session.run() is SessionEnd.CLOSED
    assert not [message for message in socket.sent if isinstance(message, dict) and message.get("type") == "error"]
    assert session.config is not None and session.config.ref_audio == second
    assert policy.judged == 2  # before: once per session.config (6)


async def test_a_changed_ref_audio_is_judged_again(tmp_path: Path) -> None:
    config = load_config(overrides={"data_dir": str(tmp_path)})
    voices = SessionVoices(WorkerPayloads(config.models, config.voices, VoiceStore.in_data_dir(tmp_path), CountingPolicy()))
    accepted = await voices.accept(StreamingSpeechSessionConfig(ref_audio=data_uri_of(wav_bytes(0.5))))
    with pytest.raises(Exception, match="not a recognised audio"):
        await voices.accept(StreamingSpeechSessionConfig(ref_audio=data_uri_of(b"not audio at all")), accepted)
