"""Security, connections: no client holds the gateway's sockets, memory or a key's stream
slot for longer than the server's bounds, and a client that leaves is no error.

Real gateway processes, raw sockets: a header past ``server.max_header_bytes`` is 431, a
client that sends nothing or trickles its headers is cut off after ``server.header_timeout_s``,
a body that does not arrive within ``server.body_timeout_s`` is 408 (the key's stream slot
freed; a voice upload's spooled file deleted), requests past ``server.max_connections`` are 503 in the envelope (upgrades too), and
a client hanging up mid-body is counted 499, never logged as an ERROR or counted as a 500.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gateway.security.auth import hash_key
from tests.integration.conftest import gateway_metric, speech_body, wait_until
from tests.integration.reliability_support import log_records
from tests.support.procs import Proc, free_port
from tests.support.stack import Stack, gateway_config, running_gateway, running_stack

KEY = "sk-connections-one-stream-4b7e1f"
MAX_HEADER = 16 * 1024
SHORT = 1.0  # header and body deadlines of the bounded gateway (s)
BOUND = 15.0  # how long a test waits for the server to act on a 1 s deadline, however slow the machine
MAX_CONNECTIONS = 4


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    extra = {
        "server": {"max_header_bytes": MAX_HEADER, "header_timeout_s": SHORT, "body_timeout_s": SHORT},
        "auth": {"keys": [{"name": "one", "sha256": hash_key(KEY), "tier": "one"}], "tiers": {"one": {"max_concurrent_streams": 1}}},
    }
    with running_stack(tmp_path_factory.mktemp("connections"), 1, 1, extra=extra) as running:
        yield running


@pytest.fixture(scope="module")
def limited(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A second gateway on the same workers with room for MAX_CONNECTIONS connections."""
    workers = {pool: [proc.url for proc in procs] for pool, procs in stack.workers.items()}
    extra = {"server": {"max_connections": MAX_CONNECTIONS, "keepalive_timeout_s": 60.0, "header_timeout_s": 60.0}}
    config = gateway_config(tmp_path_factory.mktemp("limited"), workers["low_latency"], workers["high_throughput"], free_port(), extra)
    with running_gateway(tmp_path_factory.mktemp("limited-run"), config, name="limited") as proc:
        yield proc


def raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=BOUND)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset after an answer counts as closed)."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def status_and_error(answer: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["error"]


def test_headers_over_the_limit_are_431_and_the_connection_closed(stack: Stack) -> None:
    ok = httpx.get(f"{stack.url}/health", headers={"x-filler": "a" * (MAX_HEADER // 2)}, timeout=10)
    assert ok.status_code == 200
    with raw(stack.url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nx-filler: " + b"a" * (MAX_HEADER + 1024) + b"\r\n\r\n")
        status, error = status_and_error(read_all(sock))
    assert status == 431 and error["code"] == "header_fields_too_large"
    # A header line that never ends is cut off too, once what arrived passes the limit.
    with raw(stack.url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nx-filler: ")
        try:
            for _ in range(64):  # up to 1 MiB
                sock.sendall(b"a" * 16384)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed while we were still sending
        answer = read_all(sock)
    assert not answer or status_and_error(answer)[0] == 431


def test_a_client_sending_nothing_or_half_a_head_is_cut_off(stack: Stack) -> None:
    with raw(stack.url) as silent, raw(stack.url) as trickling:
        trickling.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n")  # ...and never the blank line
        started = time.monotonic()
        assert read_all(silent) == b""  # closed without an answer: it asked nothing
        status, error = status_and_error(read_all(trickling))
        assert time.monotonic() - started < BOUND
    assert status == 408 and error["code"] == "request_timeout"


def test_a_stalled_body_is_408_and_frees_the_keys_stream_slot(stack: Stack) -> None:
    body = json.dumps(speech_body()).encode()
    with raw(stack.url) as sock:
        head = (
            f"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body[:10])  # the rest never comes
        status, error = status_and_error(read_all(sock))
    assert status == 408 and error["code"] == "request_timeout"
    # The key's one stream is free again: the same key is served, not refused with 429.
    response = httpx.post(f"{stack.url}/v1/audio/speech", json=speech_body(), headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert response.status_code == 200, response.text


def spooled_files(pid: int) -> int:
    """Files the process holds open that are already unlinked: a multipart parser's spooled
    upload (a ``TemporaryFile``) has no name on disk, only this."""
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).endswith(" (deleted)")
        except OSError:
            pass  # closed meanwhile
    return count


def test_a_stalled_voice_upload_is_408_and_its_spooled_file_deleted(stack: Stack) -> None:
    # 2 MiB of a declared 5 MiB arrive, then nothing: past 1 MiB the multipart parser spools
    # to disk, so an upload stalled forever would hold a file (and a connection) forever.
    boundary = "stalled-upload"
    preamble = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nstalled\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="consent"\r\n\r\ntrue\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="audio_sample"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\nRIFF"
    ).encode()
    pid = stack.gateway.popen.pid
    before = spooled_files(pid)
    with raw(stack.url) as sock:
        head = (
            f"POST /v1/audio/voices HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {5 * 1024 * 1024}\r\n\r\n"
        )
        sock.sendall(head.encode() + preamble + b"\0" * (2 * 1024 * 1024))
        wait_until(lambda: spooled_files(pid) > before, BOUND, "the upload spooled to disk")
        started = time.monotonic()
        status, error = status_and_error(read_all(sock))
        assert time.monotonic() - started < BOUND
    assert status == 408 and error["code"] == "request_timeout"
    wait_until(lambda: spooled_files(pid) == before, BOUND, "the spooled upload deleted")
    listed = httpx.get(f"{stack.url}/v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert "stalled" not in [voice["id"] for voice in listed.json()["voices"]]


def test_a_client_leaving_mid_body_is_499_not_an_error(stack: Stack) -> None:
    before_500 = gateway_metric(stack.url, "higgs_gateway_requests_total", status="500")
    with raw(stack.url) as sock:
        head = f"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {KEY}\r\nContent-Length: 5000\r\n\r\n"
        sock.sendall(head.encode() + b'{"model": "tts-1", ')
    wait_until(lambda: gateway_metric(stack.url, "higgs_gateway_requests_total", status="499") >= 1, BOUND, "a 499 counted")
    assert gateway_metric(stack.url, "higgs_gateway_requests_total", status="500") == before_500
    errors = [r for r in log_records(stack.gateway.log()) if r.get("level") == "ERROR"]
    assert errors == []


def test_past_max_connections_requests_and_upgrades_are_503(limited: Proc) -> None:
    url = limited.url
    with ExitStack() as held:
        for _ in range(MAX_CONNECTIONS - 1):  # + the one below = the limit, each answered (so counted)
            client = held.enter_context(httpx.Client(timeout=10))
            assert client.get(f"{url}/health").status_code == 200
        with httpx.Client(timeout=10) as last:
            assert last.get(f"{url}/health").status_code == 200
            refused = httpx.get(f"{url}/health", timeout=10)
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "too_many_connections"
            with pytest.raises(InvalidStatus) as upgrade:
                connect(url.replace("http://", "ws://") + "/v1/audio/speech/stream")
            assert upgrade.value.response.status_code == 503
    # Closed connections give their places back.
    wait_until(lambda: httpx.get(f"{url}/health", timeout=10).status_code == 200, BOUND, "served again")
