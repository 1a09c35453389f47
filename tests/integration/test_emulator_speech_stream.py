"""``/v1/audio/speech/stream`` of a real emulator process, case by case as the released worker.

Each test cites the speech-stream reference notes (``REF:n``, a line of
``vllm-omni-speech-stream.md``) and the released file and line they quote: SSS =
``serving_speech_stream.py``, SPL = ``speech_text_splitter.py``, AUD = ``protocol/audio.py``,
SS = ``serving_speech.py`` (vllm-omni 0.30.0).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK
from websockets.sync.client import ClientConnection, connect

from gateway.emulator.encode import wav_file
from tests.integration.conftest import metric, wait_until
from tests.support.procs import Proc, running_emulator

MODEL = "bosonai/higgs-audio-v3-tts-4b"
PCM_STREAM = {"response_format": "pcm", "stream_audio": True}
Message = dict[str, Any] | bytes


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    with running_emulator(tmp_path_factory.mktemp("ws"), time_scale=0.02, extra=["--synthetic-audio"]) as proc:
        yield proc


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A worker whose session timers are short enough to wait out in a test."""
    extra = ["--synthetic-audio", "--stream-config-timeout", "0.5", "--stream-idle-timeout", "1"]
    with running_emulator(tmp_path_factory.mktemp("ws-timers"), time_scale=0.02, extra=extra) as proc:
        yield proc


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """Half real time: a long sentence runs for seconds, so a slot freed sooner was freed by an abort."""
    with running_emulator(tmp_path_factory.mktemp("ws-slow"), time_scale=0.5, extra=["--synthetic-audio"]) as proc:
        yield proc


class Session:
    """A client of one session: JSON out, JSON or audio in (``Message``)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    def send(self, kind: str, **fields: Any) -> None:
        self.ws.send(json.dumps({"type": kind, **fields}))

    def recv(self) -> Message:
        frame = self.ws.recv(timeout=30)
        return frame if isinstance(frame, bytes) else json.loads(frame)

    def until(self, kind: str) -> list[Message]:
        """Every message up to and including the first JSON message of type ``kind``."""
        messages: list[Message] = []
        while True:
            message = self.recv()
            messages.append(message)
            if isinstance(message, dict) and message["type"] == kind:
                return messages

    def utterance(self, *texts: str) -> list[Message]:
        for text in texts:
            self.send("input.text", text=text)
        self.send("input.done")
        return self.until("session.done")

    def expect_end_without_close_frame(self) -> None:
        """The handler returned without closing: uvicorn drops the TCP connection (1006)."""
        with pytest.raises(ConnectionClosed) as closed:
            self.recv()
        assert closed.value.rcvd is None  # no close frame came: the client reports 1006


@contextmanager
def open_session(worker: Proc, **config: Any) -> Iterator[Session]:
    with connect(worker.url.replace("http://", "ws://") + "/v1/audio/speech/stream", max_size=None) as ws:
        session = Session(ws)
        if config:
            session.send("session.config", **config)
        yield session


@pytest.fixture
def session(emulator: Proc) -> Iterator[Session]:
    with open_session(emulator) as session:
        yield session


def kinds(messages: list[Message]) -> list[str]:
    return ["<audio>" if isinstance(m, bytes) else m["type"] for m in messages]


def audio_of(messages: list[Message]) -> bytes:
    return b"".join(m for m in messages if isinstance(m, bytes))


def starts(messages: list[Message]) -> list[str]:
    return [m["sentence_text"] for m in messages if isinstance(m, dict) and m["type"] == "audio.start"]


def tone_wav(seconds: float = 2.0) -> bytes:
    t = np.arange(int(24000 * seconds)) / 24000
    return wav_file((np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes())


def worker_metrics(worker: Proc) -> str:
    return httpx.get(f"{worker.url}/metrics", timeout=10).text


def http_pcm(worker: Proc, text: str, **fields: Any) -> bytes:
    body = {"input": text, "response_format": "pcm", **fields}
    response = httpx.post(f"{worker.url}/v1/audio/speech", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.content


def set_faults(worker: Proc, **faults: Any) -> None:
    assert httpx.post(f"{worker.url}/emulator/faults", json=faults, timeout=10).status_code == 200


# --- lifecycle ---------------------------------------------------------------------------


def test_no_config_in_time_ends_the_session(impatient: Proc) -> None:
    # REF:7 (SSS:75–76,131–138): accepted at once, then 10 s (here 0.5 s) for session.config.
    with open_session(impatient) as session:
        assert session.recv() == {"type": "error", "message": "Timeout waiting for session.config"}
        session.expect_end_without_close_frame()


def test_idle_timeout_counts_waiting_not_synthesis(impatient: Proc) -> None:
    # REF:7 (SSS:131–138): 30 s (here 1 s) between messages; synthesis time is not counted.
    with open_session(impatient, **PCM_STREAM) as session:
        set_faults(impatient, hang_seconds=1.5)  # the unit takes longer than the idle timeout
        try:
            messages = session.utterance("Hello there.")
        finally:
            set_faults(impatient, clear=True)
        assert kinds(messages)[-2:] == ["audio.done", "session.done"]
        assert messages[-2]["error"] is False
        assert session.recv() == {"type": "error", "message": "Idle timeout: no message received"}
        session.expect_end_without_close_frame()


@pytest.mark.parametrize(
    ("first", "error"),
    [
        ({"type": "input.text", "text": "Hi."}, "Expected session.config, got: input.text"),  # SSS:163–168
        ({"text": "Hi."}, "Expected session.config, got: None"),
        ({"type": "input.done"}, "Expected session.config, got: input.done"),
    ],
)
def test_anything_but_a_config_first_ends_the_session(session: Session, first: dict[str, Any], error: str) -> None:
    # REF:8
    session.ws.send(json.dumps(first))
    assert session.recv() == {"type": "error", "message": error}
    session.expect_end_without_close_frame()


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("{not json", "Invalid JSON message"),  # SSS:238–242
        ("[1, 2]", "WebSocket messages must be JSON objects"),  # SSS:244–246
        (json.dumps({"type": "session.config", "response_format": "ogg"}), "Invalid session config: "),  # SSS:141–143
        (json.dumps({"type": "session.config", "model": "x"}), "error=ErrorInfo(message='The model `x` does not exist.'"),
    ],
)
def test_a_malformed_or_invalid_first_config_ends_the_session(session: Session, raw: str, error: str) -> None:
    # REF:8 (SSS:141–143,156–158), REF:29 (SSS:266–270)
    session.ws.send(raw)
    reply = session.recv()
    assert reply["type"] == "error" and reply["message"].startswith(error)
    session.expect_end_without_close_frame()


def test_unknown_model_gets_the_error_response_repr(session: Session) -> None:
    # REF:29 (SSS:266–270): the str() of vLLM's ErrorResponse, sent as the message.
    session.send("session.config", model="x")
    assert session.recv()["message"] == (
        "error=ErrorInfo(message='The model `x` does not exist.', type='NotFoundError', param='model', code=404)"
    )


def test_session_close_closes_with_1000_and_drops_unflushed_text(session: Session) -> None:
    # REF:9 (SSS:209–211), REF:23
    session.send("session.config", **PCM_STREAM, split_granularity="sentence")
    session.send("input.text", text="Never spoken")
    session.send("session.close")
    with pytest.raises(ConnectionClosedOK) as closed:
        session.recv()
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "")


def test_a_binary_frame_ends_the_session(session: Session) -> None:
    # REF:13: starlette's receive_text finds no "text" in a binary message.
    session.send("session.config")
    session.ws.send(b"\x00\x01")
    assert session.recv() == {"type": "error", "message": "Internal error: 'text'"}
    session.expect_end_without_close_frame()


# --- client messages -----------------------------------------------------------------------


def test_errors_that_keep_the_session(session: Session) -> None:
    # REF:20 (SSS:171–174), REF:24 (SSS:213–217), REF:26 (SSS:228–256)
    session.send("session.config", **PCM_STREAM)
    session.send("input.text", text=42)
    assert session.recv() == {"type": "error", "message": "input.text requires a string value"}
    session.send("ping")
    assert session.recv() == {"type": "error", "message": "Unknown message type: ping"}
    session.ws.send("{oops")
    assert session.recv() == {"type": "error", "message": "Invalid JSON message"}
    session.ws.send('"text"')
    assert session.recv() == {"type": "error", "message": "WebSocket messages must be JSON objects"}
    session.send("session.config", response_format="ogg")  # REF:17 (SSS:157–159): the old config stays
    assert session.recv()["message"].startswith("Invalid session config: 1 validation error for StreamingSpeechSessionConfig")
    messages = session.utterance("Still here.")
    assert kinds(messages)[0] == "audio.start" and messages[0]["format"] == "pcm"
    assert kinds(messages)[-1] == "session.done"


def test_size_limits_count_characters(session: Session) -> None:
    # REF:26 (SSS:79–80,228–256): 131,072 characters for anything but a config, 4 MiB for all.
    session.send("session.config")
    envelope = json.dumps({"type": "input.text", "text": ""}, ensure_ascii=False)
    fits = json.dumps({"type": "input.text", "text": "é" * (128 * 1024 - len(envelope))}, ensure_ascii=False)
    assert len(fits) == 128 * 1024 and len(fits.encode()) > 128 * 1024
    session.ws.send(fits)  # over 128 KiB in bytes, not in characters: taken
    too_long = json.dumps({"type": "input.text", "text": "é" * (128 * 1024 - len(envelope) + 1)}, ensure_ascii=False)
    session.ws.send(too_long)
    assert session.recv() == {"type": "error", "message": "input.text message too large"}
    session.ws.send(json.dumps({"type": "session.config", "pad": "x" * (4 * 1024 * 1024)}))
    assert session.recv() == {"type": "error", "message": "WebSocket message too large"}
    session.send("ping")  # the session goes on
    assert session.recv()["message"] == "Unknown message type: ping"


def test_config_is_refused_during_an_utterance_and_applies_after(session: Session) -> None:
    # REF:16 (SSS:149–154), REF:18 (SSS:161): each accepted config resets the splitter.
    session.send("session.config", **PCM_STREAM, split_granularity="sentence")
    session.send("input.text", text="Open")
    session.send("session.config", response_format="wav")
    assert session.recv() == {
        "type": "error",
        "message": "session.config cannot be applied while an utterance is in progress; send input.done first",
    }
    assert starts(session.utterance(", still. Going")) == ["Open, still.", "Going"]
    session.send("session.config", **PCM_STREAM, split_granularity="clause")
    assert starts(session.utterance("One, two.")) == ["One,", "two."]


def test_empty_text_does_not_open_an_utterance(session: Session) -> None:
    # REF:21: only non-empty text opens the utterance.
    session.send("session.config", **PCM_STREAM)
    session.send("input.text", text="")
    session.send("session.config", response_format="wav")
    session.send("ping")
    assert session.recv()["message"] == "Unknown message type: ping"  # the config was taken silently


def test_input_done_always_answers_session_done(session: Session) -> None:
    # REF:22 (SSS:187–207), REF:52 (SSS:198–204): utterance_index counts flushes.
    session.send("session.config", **PCM_STREAM)
    session.send("input.done")
    assert session.recv() == {"type": "session.done", "utterance_index": 0, "total_sentences": 0}
    messages = session.utterance("One. Two.")  # split_granularity none: one unit
    assert starts(messages) == ["One. Two."]
    assert messages[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    session.send("input.done")
    assert session.recv() == {"type": "session.done", "utterance_index": 2, "total_sentences": 0}


def test_unknown_config_keys_and_the_speaker_alias(emulator: Proc, session: Session) -> None:
    # REF:28 (AUD:556–638): unknown keys ignored; REF:30: `speaker` is an alias of `voice`.
    upload = httpx.post(
        f"{emulator.url}/v1/audio/voices",
        data={"name": "ada", "consent": "yes"},
        files={"audio_sample": ("ada.wav", tone_wav(), "audio/wav")},
        timeout=30,
    )
    assert upload.status_code == 200, upload.text
    session.send("session.config", **PCM_STREAM, speaker="Ada", sample_rate=8000, references=[{}], extra_params={"x": 1})
    messages = session.utterance("Hello.")
    assert [m for m in messages if isinstance(m, dict) and m["type"] == "error"] == []
    session.send("session.config", voice={"id": "ada"})  # REF:30: the dict form is refused
    assert session.recv()["message"].startswith("Invalid session config: 1 validation error")


@pytest.mark.parametrize(
    ("config", "detail"),
    [
        ({"stream_audio": True}, "requires response_format='pcm'. Got response_format='wav'."),
        ({"stream_audio": True, "response_format": "pcm", "speed": 1.5}, "currently requires speed=1.0"),
        ({"speed": 5}, "less than or equal to 4"),
        ({"max_new_tokens": 0}, "greater than or equal to 1"),
        ({"split_granularity": "word"}, "'none', 'sentence' or 'clause'"),
        ({"speaker_embedding": [0.0] * 8193}, "at most 8192 items"),
        ({"task_type": "Clone"}, "'CustomVoice', 'VoiceDesign' or 'Base'"),
    ],
)
def test_invalid_configs(session: Session, config: dict[str, Any], detail: str) -> None:
    # REF:31–41 (AUD:556–638, AUD:623–637), SSS:262–264: pydantic's text after the prefix.
    session.send("session.config", **config)
    message = session.recv()["message"]
    assert message.startswith("Invalid session config: ") and detail in message


def test_a_config_that_cannot_build_a_request_ends_the_session_at_the_first_unit(session: Session) -> None:
    # REF:42 (SSS:311–330, AUD:321–325): passes the config, fails outside the unit's try.
    session.send("session.config", ref_audio="https://example.invalid/a.wav", speaker_embedding=[0.1, 0.2])
    session.send("input.text", text="Hello.")
    session.send("input.done")
    message = session.recv()["message"]
    assert message.startswith("Internal error: 1 validation error for OpenAICreateSpeechRequest")
    assert "'speaker_embedding' and 'ref_audio' are mutually exclusive" in message
    session.expect_end_without_close_frame()


# --- server messages -----------------------------------------------------------------------


def test_streamed_units_message_by_message(emulator: Proc, session: Session) -> None:
    # REF:46 (SSS:332–345), REF:49 (SSS:370–381), REF:51 (SSS:409–421), REF:52 (SSS:198–204)
    session.send("session.config", **PCM_STREAM, split_granularity="sentence")
    raw: list[str | bytes] = []
    session.send("input.text", text="Hello there. How are")
    session.send("input.text", text=" you today? Fine")
    session.send("input.done")
    while True:
        frame = session.ws.recv(timeout=30)
        raw.append(frame)
        if isinstance(frame, str) and '"session.done"' in frame:
            break
    texts = [frame for frame in raw if isinstance(frame, str)]
    assert all(t == json.dumps(json.loads(t), separators=(",", ":"), ensure_ascii=False) for t in texts)  # compact
    messages: list[Message] = [f if isinstance(f, bytes) else json.loads(f) for f in raw]
    units = ["Hello there.", "How are you today?", "Fine"]
    assert starts(messages) == units
    index = 0
    for number, text in enumerate(units):
        start = messages[index]
        assert list(start.items()) == [
            ("type", "audio.start"), ("utterance_index", 0), ("sentence_index", number),
            ("sentence_text", text), ("format", "pcm"), ("sample_rate", 24000),
        ]  # fmt: skip
        index += 1
        chunks = []
        while isinstance(messages[index], bytes):
            chunks.append(messages[index])
            index += 1
        assert len(chunks[0]) == 1920  # the engine's chunk pattern: one 40 ms frame first
        assert b"".join(chunks) == http_pcm(emulator, text)  # the unit is the HTTP request's audio
        done = messages[index]
        assert list(done.items()) == [
            ("type", "audio.done"), ("utterance_index", 0), ("sentence_index", number),
            ("total_bytes", len(b"".join(chunks))), ("error", False),
        ]  # fmt: skip
        index += 1
    assert list(messages[index].items()) == [("type", "session.done"), ("utterance_index", 0), ("total_sentences", 3)]
    # REF:52: sentence_index restarts with the next flush.
    assert [m["sentence_index"] for m in session.utterance("Again. And again.") if isinstance(m, dict) and "sentence_index" in m] == [0, 0, 1, 1]


def test_whole_file_units_carry_a_header_each(emulator: Proc, session: Session) -> None:
    # REF:48 (SSS:382–388): one frame per unit holding a whole file; wav repeats the header.
    session.send("session.config", split_granularity="sentence")
    messages = session.utterance("First one. Second one.")
    assert kinds(messages) == ["audio.start", "<audio>", "audio.done"] * 2 + ["session.done"]
    assert [m["format"] for m in messages if isinstance(m, dict) and m["type"] == "audio.start"] == ["wav", "wav"]
    assert "sample_rate" not in messages[0]
    for frame, text in zip((messages[1], messages[4]), ("First one.", "Second one.")):
        assert frame[:4] == b"RIFF" and frame[8:12] == b"WAVE"
        assert frame[44:] == http_pcm(emulator, text)
    assert messages[2]["total_bytes"] == len(messages[1])


def test_units_are_serial_and_messages_wait_meanwhile(session: Session) -> None:
    # REF:71–72 (SSS:177–196): n+1 starts after n's audio.done; a message sent meanwhile is
    # read only after the units it follows.
    session.send("session.config", **PCM_STREAM, split_granularity="sentence")
    session.send("input.text", text="One is here. Two is here. ")
    session.send("ping")
    messages = session.until("error")
    assert [k for k in kinds(messages) if k != "<audio>"] == ["audio.start", "audio.done"] * 2 + ["error"]


def test_a_mark_at_the_end_waits_for_the_next_piece(session: Session) -> None:
    # REF:65 (SPL:145–147), REF:68 (run): "OK." then "Next" is one unit; 你好。世界！ emits 你好。.
    session.send("session.config", **PCM_STREAM, split_granularity="sentence")
    session.send("input.text", text="OK.")
    session.send("ping")
    assert session.recv()["message"] == "Unknown message type: ping"  # nothing was synthesized
    session.send("input.text", text="Next")
    assert starts(session.utterance()) == ["OK.Next"]
    session.send("input.text", text="你好。世界！")
    session.send("ping")
    messages = session.until("error")
    assert starts(messages) == ["你好。"]
    assert starts(session.utterance()) == ["世界！"]


def test_splitter_rules_in_a_session(session: Session) -> None:
    # REF:66 (SPL:50–113): digits, initials, abbreviations; REF:67: a bare `...` is a unit.
    session.send("session.config", **PCM_STREAM, split_granularity="sentence")
    messages = session.utterance("Dr. Smith paid 3.50 to J. R. Jones. ... Done!")
    assert starts(messages) == ["Dr. Smith paid 3.50 to J. R. Jones.", "...", "Done!"]


# --- failures per unit -----------------------------------------------------------------------


def test_an_unknown_voice_fails_each_unit_and_keeps_the_session(session: Session) -> None:
    # REF:55–56 (SSS:396–408, SS:749–781, SS:2526–2528): `default` is a name like any other here.
    session.send("session.config", **PCM_STREAM, voice="default", split_granularity="sentence")
    messages = session.utterance("One. Two.")
    expected_error = (
        "Unknown voice 'default'. Higgs-Audio V3 has no built-in speakers. "
        "Upload a voice first via POST /v1/audio/voices, or use ref_audio + ref_text."
    )
    assert kinds(messages) == ["audio.start", "error", "audio.done"] * 2 + ["session.done"]
    assert messages[1] == {"type": "error", "message": f"Generation failed for utterance 0, sentence 0: {expected_error}"}
    assert messages[2] == {"type": "audio.done", "utterance_index": 0, "sentence_index": 0, "total_bytes": 0, "error": True}
    assert messages[4]["message"].startswith("Generation failed for utterance 0, sentence 1: ")
    session.send("session.config", **PCM_STREAM)  # the session goes on
    assert audio_of(session.utterance("Three."))


def test_a_failure_after_audio_asks_to_discard_it(emulator: Proc, session: Session) -> None:
    # REF:53 (SSS:510–522): partial_audio and action once audio was sent.
    session.send("session.config", **PCM_STREAM)
    set_faults(emulator, error_after_chunks=1)
    try:
        messages = session.utterance("A sentence long enough for more than one chunk of audio to be made.")
    finally:
        set_faults(emulator, clear=True)
    assert kinds(messages) == ["audio.start", "<audio>", "error", "audio.done", "session.done"]
    assert messages[2] == {
        "type": "error",
        "message": "Generation failed for utterance 0, sentence 0: injected fault",
        "partial_audio": True,
        "action": "discard",
    }
    assert messages[3]["error"] is True and messages[3]["total_bytes"] == 1920


def test_word_timestamps_without_an_aligner_send_only_the_error(session: Session) -> None:
    # REF:59 (SSS:293–309), REF:77: no audio.start or audio.done, yet the unit counts.
    session.send("session.config", **PCM_STREAM, word_timestamps=True)
    messages = session.utterance("Hello.")
    assert messages == [
        {
            "type": "error",
            "message": "word_timestamps=true but the server was launched without --forced-aligner; either restart "
            "the server with that flag or set word_timestamps=false in session.config.",
        },
        {"type": "session.done", "utterance_index": 0, "total_sentences": 1},
    ]


def test_a_cut_fault_drops_the_connection(emulator: Proc, session: Session) -> None:
    session.send("session.config", **PCM_STREAM)
    set_faults(emulator, cut_after_chunks=1)
    try:
        session.send("input.text", text="A sentence long enough for more than one chunk of audio to be made.")
        session.send("input.done")
        assert kinds([session.recv(), session.recv()]) == ["audio.start", "<audio>"]
        session.expect_end_without_close_frame()
    finally:
        set_faults(emulator, clear=True)


# --- engine, metrics, /load, disconnects ----------------------------------------------------------


def test_units_are_counted_as_requests_but_not_by_load(emulator: Proc, session: Session) -> None:
    # REF:81–85 (SS:1940,2064, SS:1569–1797, API:1348–1349)
    before = worker_metrics(emulator)
    session.send("session.config", **PCM_STREAM, split_granularity="sentence")
    session.utterance("One. Two. Three.")
    session.send("session.config", split_granularity="sentence")
    session.utterance("Four. Five.")
    after = worker_metrics(emulator)

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert grew("vllm_omni:requests_success_total", finished_reason="stop") == 5
    assert grew("vllm_omni:e2e_request_latency_s_count") == 5
    assert grew("vllm_omni:audio_ttfp_s_count") == 3  # streamed units only
    assert grew("vllm_omni:speech_stream_completed_total") == 3
    assert httpx.get(f"{emulator.url}/load", timeout=10).json() == {"server_load": 0}


LONG = "This sentence goes on and on so that the clip lasts for a good long while " * 6 + "."


def test_a_streamed_unit_is_aborted_when_the_client_leaves(slow: Proc) -> None:
    # REF:10 (SSS:370–395), REF:83 (async_omni.py:318), REF:85: /load never counts it.
    before = worker_metrics(slow)
    with open_session(slow, **PCM_STREAM) as session:
        session.send("input.text", text=LONG)
        session.send("input.done")
        assert kinds([session.recv(), session.recv()]) == ["audio.start", "<audio>"]
        text = worker_metrics(slow)
        assert metric(text, "vllm_omni:num_requests_running") == 1
        assert httpx.get(f"{slow.url}/load", timeout=10).json() == {"server_load": 0}
    # Noticed at the next send (the next chunk), long before the clip would have finished.
    wait_until(lambda: metric(worker_metrics(slow), "vllm_omni:num_requests_running") == 0, 10, "unit aborted")
    after = worker_metrics(slow)
    assert metric(after, "vllm_omni:requests_failed_total", reason="client_disconnect") - metric(
        before, "vllm_omni:requests_failed_total", reason="client_disconnect"
    ) == 1
    assert metric(after, "vllm_omni:speech_stream_aborted_total", reason="closed") - metric(
        before, "vllm_omni:speech_stream_aborted_total", reason="closed"
    ) == 1
    assert metric(after, "vllm_omni:requests_success_total", finished_reason="stop") == metric(
        before, "vllm_omni:requests_success_total", finished_reason="stop"
    )


def test_a_whole_file_unit_runs_to_its_end_when_the_client_leaves(slow: Proc) -> None:
    # REF:10 (SSS:349,382–388): without stream_audio nothing aborts the request.
    before = worker_metrics(slow)
    with open_session(slow, response_format="pcm") as session:
        session.send("input.text", text=LONG)
        session.send("input.done")
        assert session.recv()["type"] == "audio.start"
        wait_until(lambda: metric(worker_metrics(slow), "vllm_omni:num_requests_running") == 1, 10, "unit running")
    # The client is gone; the unit keeps its slot until its clip is done.
    assert metric(worker_metrics(slow), "vllm_omni:num_requests_running") == 1
    wait_until(
        lambda: metric(worker_metrics(slow), "vllm_omni:requests_success_total", finished_reason="stop")
        > metric(before, "vllm_omni:requests_success_total", finished_reason="stop"),
        60,
        "the unit completed",
    )
    after = worker_metrics(slow)
    assert metric(after, "vllm_omni:requests_failed_total", reason="client_disconnect") == metric(
        before, "vllm_omni:requests_failed_total", reason="client_disconnect"
    )
