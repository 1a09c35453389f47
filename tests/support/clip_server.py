"""A local HTTP server for ``ref_audio`` URLs: what a worker fetches, on 127.0.0.1 only.

Paths: ``/clip.wav`` (3 s of speech-like tone), ``/short.wav`` (0.4 s), ``/missing.wav``
(404), ``/broken.wav`` (500), ``/huge.wav`` (a Content-Length past the workers' 25 MB
clip limit; the body is never sent). Every request is counted per path.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from gateway.emulator.encode import wav_file

HUGE_BYTES = 25 * 1024 * 1024 + 1


def tone_wav(seconds: float) -> bytes:
    t = np.arange(int(24000 * seconds)) / 24000
    return wav_file((np.sin(2 * np.pi * 180 * t) * 6000).astype("<i2").tobytes())


@dataclass
class ClipServer:
    url: str
    hits: Counter[str] = field(default_factory=Counter)


@contextmanager
def clip_server() -> Iterator[ClipServer]:
    clips = {"/clip.wav": tone_wav(3.0), "/short.wav": tone_wav(0.4)}
    state = ClipServer("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.hits[self.path] += 1
            if self.path in clips:
                self._send(200, clips[self.path])
            elif self.path == "/broken.wav":
                self._send(500, b"broken")
            elif self.path == "/huge.wav":
                self.send_response(200)
                self.send_header("Content-Type", "audio/wav")
                self.send_header("Content-Length", str(HUGE_BYTES))
                self.end_headers()  # the worker refuses on the length alone
            else:
                self._send(404, b"not found")

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "audio/wav" if status == 200 else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="clip-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
