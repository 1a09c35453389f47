"""Security, upload size: a voice upload is refused by what arrives, not by what it declares.

A chunked 60 MiB upload (no ``Content-Length``; the limit is 10 MiB of audio) to a real
gateway under uvicorn: the 413 comes before 11 MiB of the body has been read. The bytes
the gateway read are counted by an ASGI wrapper around it, so the bound is the
gateway's, not the kernel's socket buffers'.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

from gateway.app import create_app
from gateway.config import load_config
from tests.integration.conftest import serving_in_thread
from tests.support.procs import free_port
from tests.support.stack import ADMIN_TOKEN, LL_PROFILE

MIB = 1024 * 1024
SENT_AT_MOST = 60 * MIB
READ_AT_MOST = 11 * MIB
CHUNK = 256 * 1024
BOUNDARY = "upload-size-boundary"


class BodyCounter:
    """The app, counting the request body bytes it pulls from the server."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self.read = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                self.read += len(message.get("body", b""))
            return message

        await self._app(scope, counted if scope["type"] == "http" else receive, send)


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def chunked_upload(port: int, path: str, headers: dict[str, str]) -> tuple[bytes, int]:
    """Send a multipart upload of up to 60 MiB as chunks until an answer arrives; return the
    answer and how many body bytes were sent."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    preamble = (
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nhuge\r\n"
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"consent\"\r\n\r\ntrue\r\n"
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"audio_sample\"; filename=\"huge.wav\"\r\n"
        "Content-Type: audio/wav\r\n\r\nRIFF"
    ).encode()
    answer = bytearray()
    answered = threading.Event()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:

        def read_answer() -> None:
            try:
                while data := sock.recv(65536):
                    answer.extend(data)
                    answered.set()
                    if answer.endswith(b"}}"):
                        break  # the whole error envelope: the gateway may keep the socket open
            except OSError:
                pass
            answered.set()

        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        reader = threading.Thread(target=read_answer, daemon=True)
        reader.start()
        sent = 0
        payload = b"\0" * CHUNK
        try:
            sock.sendall(chunk(preamble))
            sent += len(preamble)
            while sent < SENT_AT_MOST and not answered.is_set():
                sock.sendall(chunk(payload))
                sent += CHUNK
            if not answered.is_set():
                sock.sendall(chunk(f"\r\n--{BOUNDARY}--\r\n".encode()) + b"0\r\n\r\n")
        except OSError:
            pass  # the gateway answered and closed while we were still sending
        reader.join(60)
    return bytes(answer), sent


def test_a_chunked_upload_is_refused_before_11_mib_is_read(tmp_path: Path) -> None:
    port = free_port()
    config = load_config(
        overrides={
            "server": {"host": "127.0.0.1", "port": port},
            "data_dir": str(tmp_path / "data"),
            # Nothing listens there: an upload needs no worker to be refused.
            "pools": {"low_latency": {"profile": LL_PROFILE, "workers": [f"http://127.0.0.1:{free_port()}"]}},
            "auth": {"admin_token": ADMIN_TOKEN},
        }
    )
    assert config.voices.max_upload_bytes == 10 * MIB
    counter = BodyCounter(create_app(config))
    with serving_in_thread(counter, port):
        for path, headers in (
            ("/v1/audio/voices", {}),
            ("/admin/voices", {"Authorization": f"Bearer {ADMIN_TOKEN}"}),
        ):
            counter.read = 0
            answer, sent = chunked_upload(port, path, headers)
            assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
            assert b'"code":"payload_too_large"' in answer, answer[-300:]
            assert counter.read < READ_AT_MOST, f"the gateway read {counter.read} bytes before refusing"
            assert sent < SENT_AT_MOST, "refused only once everything was sent"
