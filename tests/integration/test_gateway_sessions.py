"""Voice sessions through a real gateway in front of emulated workers (one per pool).

The client is the one the worker's own endpoint is tested with (``websockets``); the
gateway must answer it the same way, pipeline the sentences across both pools, stop an
utterance on ``input.cancel`` and leave nothing behind (worker ``/load``, the gateway's
in-flight gauges and open-session gauge back to 0) however a session ends.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.integration.conftest import gateway_metric, wait_idle, wait_until, worker_load
from tests.integration.test_emulator_speech_stream import Message, Session, kinds, tone_wav
from tests.support.stack import Stack, running_stack

KEY = "session-test-key"
LIMITED_KEY = "one-session-key"
ALLOWED_ORIGIN = "https://app.example"
SENTENCES = ["The quick brown fox jumps over the lazy dog near the river bank.", "Then it rests.", "Finally it sleeps."]
LONG_SENTENCE = " ".join(["The long sentence keeps on going and going"] * 6) + "."
PCM_STREAM = {"response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}
REF = {"ref_audio": "data:audio/wav;base64," + base64.b64encode(tone_wav()).decode(), "ref_text": "A reference."}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from gateway.security.auth import hash_key

    extra = {
        "auth": {
            "keys": [{"name": "main", "sha256": hash_key(KEY)}, {"name": "limited", "sha256": hash_key(LIMITED_KEY), "tier": "one"}],
            "tiers": {"one": {"max_sessions": 1}},
        },
        "server": {"cors_origins": [ALLOWED_ORIGIN]},
        # A window longer than LONG_SENTENCE's audio: its next sentence is requested while it
        # still streams, which is what the pipelining test looks for (test_gateway_session_limits
        # tests the window itself). The timers are generous: a client on a busy machine may
        # pause seconds between two messages (polling the workers, say), and a session that
        # timed out meanwhile is not what these tests look at; the idle timer has its own stack.
        "sessions": {"idle_timeout_s": 60.0, "config_timeout_s": 60.0, "max_buffered_chars": 2000, "lookahead_s": 60},
    }
    with running_stack(tmp_path_factory.mktemp("sessions"), 1, 1, time_scale=0.5, extra=extra) as running:
        yield running


@pytest.fixture
def idle_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A gateway ending sessions silent for 1 s (shorter than LONG_SENTENCE's audio)."""
    extra = {"sessions": {"idle_timeout_s": 1.0, "config_timeout_s": 60.0}}
    with running_stack(tmp_path_factory.mktemp("sessions-idle"), 1, 0, time_scale=0.5, extra=extra) as running:
        yield running


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/v1/audio/speech/stream"


@contextmanager
def gateway_session(stack: Stack, key: str = KEY, **config: Any) -> Iterator[Session]:
    with connect(ws_url(stack.url), max_size=None, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        session = Session(ws)
        if config:
            session.send("session.config", **config)
        yield session


def worker_urls(stack: Stack) -> list[str]:
    return [proc.url for procs in stack.workers.values() for proc in procs]


def settled(stack: Stack) -> None:
    """No sentence left anywhere: worker /load, gateway in-flight and open sessions at 0."""
    wait_idle(stack.url, worker_urls(stack))
    wait_sessions_closed(stack)


def wait_sessions_closed(stack: Stack) -> None:
    """Until the gateway has ended every session: a client's close handshake is over before
    the gateway's session has freed what it held (its key's place, among others)."""
    wait_until(lambda: gateway_metric(stack.url, "higgs_gateway_sessions_open") == 0, 30, "sessions_open back to 0")


def shape(messages: list[Message]) -> list[str]:
    """The message kinds with consecutive audio frames folded into one."""
    folded: list[str] = []
    for kind in kinds(messages):
        if not (kind == "<audio>" and folded and folded[-1] == "<audio>"):
            folded.append(kind)
    return folded


def without_frames(messages: list[Message]) -> list[dict[str, Any]]:
    return [m for m in messages if isinstance(m, dict)]


def test_a_client_written_for_the_worker_gets_the_same_answers(stack: Stack) -> None:
    worker = stack.workers["low_latency"][0]
    config = {"model": "bosonai/higgs-audio-v3-tts-4b", **PCM_STREAM, **REF, "seed": 7}
    with connect(ws_url(worker.url), max_size=None) as ws:
        direct = Session(ws)
        direct.send("session.config", **config)
        direct_messages = direct.utterance(*[s + " " for s in SENTENCES])
    with gateway_session(stack, **config) as session:
        via_gateway = session.utterance(*[s + " " for s in SENTENCES])
    assert shape(via_gateway) == shape(direct_messages)
    assert shape(via_gateway) == ["audio.start", "<audio>", "audio.done"] * 3 + ["session.done"]
    # Same fields, same order; only the byte counts may differ (another worker, another clip).
    for mine, theirs in zip(without_frames(via_gateway), without_frames(direct_messages), strict=True):
        assert list(mine) == list(theirs)
        assert {k: v for k, v in mine.items() if k != "total_bytes"} == {k: v for k, v in theirs.items() if k != "total_bytes"}
    for done in (m for m in without_frames(via_gateway) if m["type"] == "audio.done"):
        assert done["total_bytes"] > 0 and done["error"] is False
    settled(stack)


class BothBusy:
    """Samples two workers' ``/load`` together: did both ever carry a request at once?"""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.seen = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                loads = [int(client.get(f"{url}/load").json()["server_load"]) for url in self.urls]
                self.seen = self.seen or all(load > 0 for load in loads)
                self._stop.wait(0.02)

    def __enter__(self) -> BothBusy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_later_sentences_are_pipelined_and_routed_by_deadline(stack: Stack) -> None:
    ll, ht = stack.workers["low_latency"][0].url, stack.workers["high_throughput"][0].url
    with BothBusy([ll, ht]) as both:
        with gateway_session(stack, **PCM_STREAM, gateway_debug=True) as session:
            messages = session.utterance(LONG_SENTENCE + " ", "Short one. ", "And another.")
    starts = [m for m in without_frames(messages) if m["type"] == "audio.start"]
    assert [s["sentence_index"] for s in starts] == [0, 1, 2]
    first, *later = [s["gateway"] for s in starts]
    assert (first["pool"], first["reason"]) == ("low_latency", "fastest_ttfp"), first
    for routing in later:
        # Due seconds after the long first sentence starts playing: high-throughput meets it.
        assert (routing["pool"], routing["reason"]) == ("high_throughput", "deadline_met"), routing
        assert routing["deadline_ms"] > routing["predicted_start_ms"] > 0
    # Sentence 2 ran on high-throughput while sentence 1 was still streaming from low-latency.
    assert both.seen, "sentence 2 was not requested before sentence 1's audio ended"
    assert gateway_metric(stack.url, "higgs_gateway_session_sentences_total", pool="high_throughput", reason="deadline_met") >= 2
    assert gateway_metric(stack.url, "higgs_gateway_session_gap_seconds_count") >= 2
    settled(stack)


def test_barge_in_stops_the_utterance_and_frees_every_slot(stack: Stack) -> None:
    with gateway_session(stack, **PCM_STREAM) as session:
        for text in (LONG_SENTENCE + " ", LONG_SENTENCE + " ", LONG_SENTENCE + " "):
            session.send("input.text", text=text)
        received = 0
        while True:  # wait until audio flows
            message = session.recv()
            if isinstance(message, bytes):
                received += len(message)
                break
        assert sum(worker_load(url) for url in worker_urls(stack)) >= 1
        session.send("input.cancel")
        while True:
            message = session.recv()
            if isinstance(message, bytes):
                received += len(message)
                continue
            if message["type"] == "input.cancelled":
                break
        assert message == {"type": "input.cancelled", "utterance_index": 0, "total_bytes": received}
        # Every upstream request of it ended before the answer: the workers see none (each
        # worker counts its request out once it sees the stream closed, so this is polled).
        wait_idle(stack.url, worker_urls(stack))
        # The session goes on: the next utterance is number 1, and nothing of 0 follows.
        after = session.utterance("Hello again.")
        assert [m["utterance_index"] for m in without_frames(after)] == [1, 1, 1]
        assert shape(after) == ["audio.start", "<audio>", "audio.done", "session.done"]
    assert gateway_metric(stack.url, "higgs_gateway_session_barge_in_seconds_count") >= 1
    settled(stack)


def drop_connection(ws: ClientConnection) -> None:
    """Go away without a close frame, as a crashed client does."""
    ws.socket.shutdown(socket.SHUT_RDWR)
    ws.socket.close()


def test_sessions_abandoned_every_way_leave_nothing_behind(stack: Stack) -> None:
    for way in ("drop mid-sentence", "close mid-sentence", "drop idle", "bad message mid-sentence", "cancel storm"):
        with gateway_session(stack, **PCM_STREAM) as session:
            session.send("input.text", text=LONG_SENTENCE + " " + LONG_SENTENCE + " ")
            assert isinstance(session.recv(), dict)  # audio.start: a request is in flight
            if way == "drop mid-sentence":
                drop_connection(session.ws)
                continue
            if way == "close mid-sentence":
                session.ws.close()
                continue
            if way == "drop idle":
                session.send("input.cancel")
                drop_connection(session.ws)
                continue
            if way == "cancel storm":
                for _ in range(20):
                    session.send("input.text", text="One more sentence. ")
                    session.send("input.cancel")
                session.ws.close()
                continue
            session.ws.send(b"\x00\x01")  # a binary frame ends the session, as on the worker
            messages = []
            with pytest.raises(ConnectionClosed):
                while True:
                    messages.append(session.recv())
            assert {"type": "error", "message": "Internal error: 'text'"} in messages
    settled(stack)


def test_idle_sessions_time_out_but_not_while_audio_is_due(idle_stack: Stack) -> None:
    with gateway_session(idle_stack, **PCM_STREAM) as session:
        # Longer than the 1 s idle timeout to deliver, with no message from the client meanwhile.
        messages = session.utterance(LONG_SENTENCE)
        assert shape(messages) == ["audio.start", "<audio>", "audio.done", "session.done"]
        assert session.recv() == {"type": "error", "message": "Idle timeout: no message received"}
        with pytest.raises(ConnectionClosed) as closed:
            session.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    settled(idle_stack)


def test_bad_messages_get_the_workers_answers(stack: Stack) -> None:
    with gateway_session(stack) as session:
        session.send("input.text", text="hi")
        assert session.recv() == {"type": "error", "message": "Expected session.config, got: input.text"}
        with pytest.raises(ConnectionClosed):
            session.recv()
    with gateway_session(stack, **PCM_STREAM) as session:
        session.send("nonsense")
        assert session.recv() == {"type": "error", "message": "Unknown message type: nonsense"}
        session.send("input.text", text=5)
        assert session.recv() == {"type": "error", "message": "input.text requires a string value"}
        session.send("input.text", text="x" * 2001)  # over sessions.max_buffered_chars
        assert "2000 characters" in session.recv()["message"]  # type: ignore[index]
        session.send("session.config", model="not-a-model")
        assert "The model `not-a-model` does not exist." in session.recv()["message"]  # type: ignore[index]
        # HTTP's max_new_tokens bounds: past the workers' max_model_len (the config stays) ...
        session.send("session.config", **PCM_STREAM, max_new_tokens=99_999)
        assert "Invalid session config: max_new_tokens must be at most 8192" in session.recv()["message"]  # type: ignore[index]
        assert shape(session.utterance("Still here.")) == ["audio.start", "<audio>", "audio.done", "session.done"]
    # ... and below the first audio frame, which as the first config ends the session.
    with gateway_session(stack, **PCM_STREAM, max_new_tokens=7) as session:
        message = session.recv()
        assert message["type"] == "error"  # type: ignore[index]
        assert message["message"].startswith("Invalid session config: max_new_tokens must be at least 8")  # type: ignore[index]
        with pytest.raises(ConnectionClosed):
            session.recv()
    settled(stack)


def test_keys_origins_and_session_limits_are_checked_before_the_upgrade(stack: Stack) -> None:
    url = ws_url(stack.url)
    with pytest.raises(InvalidStatus) as refused:
        connect(url)
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "missing_api_key"
    assert refused.value.response.headers["x-request-id"]
    # Browsers: a subprotocol or a query parameter, from an allowed origin only.
    with connect(url, subprotocols=["higgs-gateway", f"bearer.{KEY}"], origin=ALLOWED_ORIGIN) as ws:  # type: ignore[list-item,arg-type]
        assert ws.subprotocol == "higgs-gateway"
    with connect(f"{url}?api_key={KEY}"):
        pass
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{url}?api_key={KEY}", origin="https://evil.example")  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    # The tier's max_sessions: one open session, the second refused with 429.
    with gateway_session(stack, key=LIMITED_KEY):
        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers={"Authorization": f"Bearer {LIMITED_KEY}"})
        assert refused.value.response.status_code == 429
        assert refused.value.response.headers["retry-after"] == "1"
    wait_sessions_closed(stack)
    with gateway_session(stack, key=LIMITED_KEY):
        pass  # its place was given back
    # Counted per key only: sessions are not requests, so not rejections of one either.
    assert gateway_metric(stack.url, "higgs_gateway_key_requests_total", result="session_limited") == 1
    assert gateway_metric(stack.url, "higgs_gateway_rejections_total") == 0
    settled(stack)
