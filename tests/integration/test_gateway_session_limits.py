"""One voice session stays inside its key's limits, through a real gateway and emulated workers.

A `free`-tier key (one stream, one session) opens a session, queues 300 sentences and reads
nothing (a small receive buffer and a client queue of one frame). The workers are slowed
below real time, so the session always has a sentence to ask for. Sampled all along: the
gateway never runs more than the tier's one stream on the workers for it (it used to run
one per worker slot), the audio it holds for the session never passes the look-ahead window
(plus the chunk that filled it), its memory stays put; the same key's HTTP request is
refused by the stream limit meanwhile; and the session is ended at its maximum duration
(1008), every slot freed and the key's stream given back. (A client that stops reading long
enough to fill its TCP buffers is ended sooner, by the send timeout:
tests/unit/sessions/test_session_limits.py.)
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.integration.conftest import (
    BYTES_PER_SECOND,
    gateway_metric,
    speech_body,
    total_inflight,
    wait_idle,
    wait_until,
    worker_load,
)
from tests.support.stack import Stack, running_stack

FREE_KEY = "free-tier-key"
LOOKAHEAD_S = 2.0
SEND_TIMEOUT_S = 3.0
MAX_QUEUED = 400
MAX_DURATION_S = 10.0
WORKER_CHUNK_BYTES = BYTES_PER_SECOND  # the emulator's chunks after the first: 25 codec frames, 1 s
SENTENCE = "This sentence takes a few seconds to say out loud."
PCM_STREAM = {"response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}
BUFFERED = "higgs_gateway_session_buffered_audio_bytes"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from gateway.security.auth import hash_key

    extra = {
        "auth": {
            "keys": [{"name": "free", "sha256": hash_key(FREE_KEY), "tier": "free"}],
            "tiers": {"free": {"max_concurrent_streams": 1, "max_sessions": 1, "rate_limit_rps": 50, "rate_limit_burst": 50}},
        },
        "sessions": {
            "lookahead_s": LOOKAHEAD_S, "send_timeout_s": SEND_TIMEOUT_S, "max_queued_sentences": MAX_QUEUED,
            "max_buffered_chars": 100_000, "idle_timeout_s": 60, "max_duration_s": MAX_DURATION_S,
        },
    }  # fmt: skip
    with running_stack(tmp_path_factory.mktemp("session-limits"), 1, 1, time_scale=6, extra=extra) as running:
        yield running


class Peaks(threading.Thread):
    """Samples, until stopped: the streams the gateway runs on workers, its buffered session audio."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.workers = [proc.url for procs in stack.workers.values() for proc in procs]
        self.streams = 0
        self.buffered = 0.0
        self.samples = 0
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.is_set():
            self.streams = max(self.streams, total_inflight(self.stack.url))
            self.buffered = max(self.buffered, gateway_metric(self.stack.url, BUFFERED))
            self.samples += 1
            self._stopping.wait(0.02)

    def stop(self) -> None:
        self._stopping.set()
        self.join()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def non_reading_socket(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
    sock.connect((host, int(port)))
    return sock


def http_speech(stack: Stack) -> httpx.Response:
    headers = {"Authorization": f"Bearer {FREE_KEY}"}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{stack.url}/v1/audio/speech", json=speech_body(response_format="pcm"), headers=headers) as response,
    ):
        response.read()
        return response


def test_a_free_session_that_queues_300_sentences_and_reads_nothing_stays_inside_its_limits(stack: Stack) -> None:
    pid = stack.gateway.popen.pid
    rss_before = rss_bytes(pid)
    peaks = Peaks(stack)
    peaks.start()
    url = stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    started = time.monotonic()
    with connect(url, sock=non_reading_socket(stack.url), max_size=None, max_queue=1, ping_interval=None,
                 additional_headers={"Authorization": f"Bearer {FREE_KEY}"}) as ws:  # fmt: skip
        ws.send('{"type": "session.config", "response_format": "pcm", "stream_audio": true, "split_granularity": "sentence"}')
        for _ in range(30):
            ws.send('{"type": "input.text", "text": "%s"}' % ((SENTENCE + " ") * 10))
        ws.send('{"type": "input.done"}')
        wait_until(lambda: sum(worker_load(u) for u in peaks.workers) == 1, 20, "the session's first sentence on a worker")
        # From here on the session always holds the key's one stream (each sentence hands it to the next).
        refused = http_speech(stack)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "concurrent_streams_exceeded"
        wait_until(lambda: gateway_metric(stack.url, "higgs_gateway_sessions_total", ended="max_duration") == 1,
                   MAX_DURATION_S + 10, "the session ended at its maximum duration")  # fmt: skip
        lasted = time.monotonic() - started
    peaks.stop()
    wait_idle(stack.url, peaks.workers, timeout=30)
    assert gateway_metric(stack.url, "higgs_gateway_sessions_open") == 0
    assert gateway_metric(stack.url, BUFFERED) == 0
    assert gateway_metric(stack.url, "higgs_gateway_key_streams", tier="free") == 0  # the key's stream is back
    rss_after = rss_bytes(pid)
    print(f"streams peak {peaks.streams}, buffered peak {peaks.buffered:.0f} B over {peaks.samples} samples, "
          f"ended after {lasted:.1f} s, RSS {rss_before / 1e6:.1f} -> {rss_after / 1e6:.1f} MB")  # fmt: skip
    assert peaks.samples > 20
    assert peaks.streams == 1  # the tier's one stream
    assert peaks.buffered <= LOOKAHEAD_S * BYTES_PER_SECOND + WORKER_CHUNK_BYTES
    assert lasted <= MAX_DURATION_S + SEND_TIMEOUT_S + 2  # its bound, plus a close that does not wait long
    assert rss_after - rss_before < 20_000_000


def test_a_session_is_told_and_closed_when_it_reaches_its_maximum_duration(stack: Stack) -> None:
    url = stack.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url, max_size=None, additional_headers={"Authorization": f"Bearer {FREE_KEY}"}) as ws:
        ws.send('{"type": "session.config", "response_format": "pcm", "stream_audio": true}')
        message = ws.recv(timeout=MAX_DURATION_S + 10)
        assert message == '{"type":"error","message":"Session reached its maximum duration (10 s); open a new one"}'
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, "maximum session duration reached")
