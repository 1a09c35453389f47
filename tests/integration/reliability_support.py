"""Helpers for the reliability, security and durability tests (real processes, real sockets).

``StubWorker`` is a minimal worker on a real 127.0.0.1 socket that speaks just enough of the
vllm-omni surface for the gateway to route to it (``/health``, ``/load``, ``/metrics``, the
voices listing) and answers speech requests the way a test tells it to: a given 5xx status,
or silence. It records every request it receives, so a test can prove what reached a worker
and what did not, and when the gateway probed it. The emulator cannot answer 502/503 or
time its health probes; this can.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from gateway.types.codec import BYTES_PER_SECOND
from tests.support.audio import reference_wav

BYTES_PER_FRAME = 1920  # one 40 ms codec frame of 24 kHz mono s16le
FRAMES_PER_SECOND = 25
CHARS_PER_SECOND = 15.0  # the emulator's speaking rate (gateway/worker/timing.py)
STAGE0_MAX_TOKENS = 2048
CODEBOOK_DELAY_STEPS = 7


def expected_pcm_bytes(text: str) -> int:
    """The emulator's deterministic clip length for ``text`` (default token limits), in bytes.

    Mirrors ``StepModel.frames_for``; ``test_expected_length_matches_a_worker`` holds the
    two together against a live worker so a change in the emulator cannot go unnoticed.
    """
    frames = max(1, math.ceil(len(text.strip()) / CHARS_PER_SECOND * FRAMES_PER_SECOND))
    # Every clip also costs the codebook delay and one trimmed residual frame in tokens.
    frames = max(1, min(frames, STAGE0_MAX_TOKENS - CODEBOOK_DELAY_STEPS - 1))
    return frames * BYTES_PER_FRAME


def upload_voice(gateway_url: str, name: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    response = httpx.post(
        f"{gateway_url}/v1/audio/voices",
        data={"name": name, "consent": "true"},
        files={"audio_sample": (f"{name}.wav", reference_wav(), "audio/wav")},
        headers=headers,
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def worker_voices(worker_url: str) -> set[str]:
    response = httpx.get(f"{worker_url}/v1/audio/voices", timeout=10)
    assert response.status_code == 200, response.text
    return {v["name"] for v in response.json()["uploaded_voices"]}


def audio_seconds(pcm_bytes: int) -> float:
    return pcm_bytes / BYTES_PER_SECOND


@dataclass(frozen=True)
class Seen:
    """One request the stub received."""

    method: str
    path: str
    at: float  # time.monotonic()
    body: bytes = b""


@dataclass
class StubBehaviour:
    speech_status: int = 500  # what POST /v1/audio/speech answers
    # With speech_status 200: "empty" (a stream that ends without audio) or "cut" (the
    # headers promise audio, then the connection closes before any byte).
    speech_body: str = "empty"
    hang_s: float = 0.0  # send nothing at all for this long first
    health_status: int = 200


@dataclass
class StubWorker:
    url: str
    behaviour: StubBehaviour
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests(self, path: str, method: str | None = None) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path.split("?", 1)[0] == path and (method is None or s.method == method)]

    def speech_requests(self) -> list[Seen]:
        return self.requests("/v1/audio/speech", "POST")


def _handler(stub: StubWorker) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

        def _record(self) -> bytes:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            with stub.lock:
                stub.seen.append(Seen(self.command, self.path, time.monotonic(), body))
            return body

        def _json(self, status: int, document: Any) -> None:
            payload = json.dumps(document).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the gateway gave up on us (first-byte timeout): nobody to answer

        def _no_audio(self, how: str) -> None:
            try:
                self.send_response(200)
                self.send_header("content-type", "audio/pcm")
                self.send_header("content-length", "0" if how == "empty" else str(BYTES_PER_SECOND))
                self.end_headers()
                self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True  # "cut": fewer bytes than promised, then the close

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            self._record()
            path = self.path.split("?", 1)[0]
            if path == "/health":
                status = stub.behaviour.health_status
                self._json(status, {"status": "healthy" if status == 200 else "unhealthy"})
            elif path == "/load":
                self._json(200, {"server_load": 0})
            elif path == "/v1/audio/voices":
                self._json(200, {"voices": [], "uploaded_voices": []})
            elif path == "/metrics":
                self._json(200, {})
            else:
                self._json(404, {"error": {"message": "not found", "type": "NotFoundError", "param": None, "code": 404}})

        def do_POST(self) -> None:  # noqa: N802
            self._record()
            path = self.path.split("?", 1)[0]
            if path != "/v1/audio/speech":
                self._json(200, {"success": True})
                return
            behaviour = stub.behaviour
            if behaviour.hang_s:
                time.sleep(behaviour.hang_s)  # accepted, sends nothing: a wedged engine
            status = behaviour.speech_status
            if status == 200:
                self._no_audio(behaviour.speech_body)
                return
            kind = {500: "InternalServerError", 502: "BadGateway", 503: "ServiceUnavailable"}.get(status, "Error")
            error = {"message": f"stub worker answers {status}", "type": kind, "param": None, "code": status}
            self._json(status, {"error": error})

        def do_DELETE(self) -> None:  # noqa: N802
            self._record()
            self._json(200, {"success": True})

    return Handler


@contextmanager
def stub_worker(behaviour: StubBehaviour | None = None) -> Iterator[StubWorker]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    stub = StubWorker(f"http://127.0.0.1:{server.server_address[1]}", behaviour or StubBehaviour())
    server.RequestHandlerClass = _handler(stub)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def worker_counters(worker_url: str) -> dict[str, float]:
    """Every request-outcome counter an emulated worker keeps, plus its in-flight count."""
    from tests.integration.conftest import metric

    text = httpx.get(f"{worker_url}/metrics", timeout=10).text
    load = int(httpx.get(f"{worker_url}/load", timeout=10).json()["server_load"])
    return {
        "success": metric(text, "vllm_omni:requests_success_total", finished_reason="stop"),
        "failed": metric(text, "vllm_omni:requests_failed_total"),
        "aborted": metric(text, "vllm_omni:speech_stream_aborted_total"),
        "completed_streams": metric(text, "vllm_omni:speech_stream_completed_total"),
        "load": float(load),
    }


def rss_bytes(pid: int) -> int:
    """Resident set size of a live process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def log_records(text: str) -> list[dict[str, Any]]:
    """The gateway's JSON log lines as objects (anything else on stdout/stderr is skipped)."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body's ``data:`` lines, in order."""
    events = []
    for block in body.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                events.append(json.loads(line[5:].strip()))
    return events
