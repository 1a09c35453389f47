"""Gateway core, client disconnects: a client that leaves mid-stream or before the first
byte frees its worker slot at once, on the worker (``/load``) and in the gateway (in-flight).

The client is a raw socket, so the test decides exactly when the connection closes.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.conftest import (
    SHORT_TEXT,
    gateway_metric,
    metric,
    set_faults,
    speech_body,
    total_inflight,
    wait_idle,
    wait_until,
    worker_load,
)
from tests.support.stack import Stack, running_stack

# ~80 s of audio (the Stage 0 token cap): at time scale 0.1 the stream lasts seconds.
VERY_LONG_TEXT = " ".join([SHORT_TEXT] * 18)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("disconnect"), 1, 1, time_scale=0.1) as running:
        yield running


def open_speech(gateway_url: str, text: str, sla_class: str) -> socket.socket:
    """Send a speech request on a raw connection and return it unread."""
    parts = urlsplit(gateway_url)
    body = json.dumps(speech_body(text, response_format="pcm")).encode()
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    head = (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nx-sla-class: {sla_class}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def read_until_audio(sock: socket.socket) -> bytes:
    """Read the response head and at least some body bytes."""
    received = b""
    while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < 1024:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed early: {received[:300]!r}"
        received += chunk
    return received


def worker_aborts(worker_url: str) -> float:
    text = httpx.get(f"{worker_url}/metrics", timeout=10).text
    return metric(text, "vllm_omni:speech_stream_aborted_total", reason="cancelled")


def test_disconnect_mid_stream_frees_the_worker(stack: Stack) -> None:
    ll = stack.workers["low_latency"][0].url
    aborts_before = worker_aborts(ll)
    disconnects_before = gateway_metric(stack.url, "higgs_gateway_client_disconnects_total", phase="streaming")

    sock = open_speech(stack.url, VERY_LONG_TEXT, "latency")
    try:
        received = read_until_audio(sock)
        assert received.startswith(b"HTTP/1.1 200"), received[:200]
        assert b"x-gateway-pool: low_latency" in received.lower()
        assert worker_load(ll) == 1 and total_inflight(stack.url) == 1, "mid-stream: one request in flight"
    finally:
        sock.close()

    wait_idle(stack.url, [ll], timeout=30)
    # The worker saw the disconnect (aborted, not completed) and the gateway counted it.
    wait_until(lambda: worker_aborts(ll) == aborts_before + 1, 10, "the worker aborted the stream")
    after = gateway_metric(stack.url, "higgs_gateway_client_disconnects_total", phase="streaming")
    assert after == disconnects_before + 1


def test_disconnect_before_the_first_byte_frees_the_worker(stack: Stack) -> None:
    ll = stack.workers["low_latency"][0].url
    aborts_before = worker_aborts(ll)
    disconnects_before = gateway_metric(stack.url, "higgs_gateway_client_disconnects_total", phase="before_first_byte")
    set_faults(ll, hang_seconds=1.5)  # the worker sends nothing, not even headers, for a while
    try:
        sock = open_speech(stack.url, VERY_LONG_TEXT, "latency")
        try:
            wait_until(
                lambda: total_inflight(stack.url) == 1 and worker_load(ll) == 1,
                10,
                "request routed and held by the hanging worker",
            )
        finally:
            sock.close()
        wait_until(lambda: total_inflight(stack.url) == 0, 10, "gateway in-flight back to 0 after the client left")
        # The worker holds the request until its hang ends, then sees the closed connection
        # and aborts the stream instead of generating the clip for nobody.
        wait_idle(stack.url, [ll], timeout=30)
        wait_until(lambda: worker_aborts(ll) == aborts_before + 1, 10, "the worker aborted the stream")
    finally:
        set_faults(ll, clear=True)
    after = gateway_metric(stack.url, "higgs_gateway_client_disconnects_total", phase="before_first_byte")
    assert after == disconnects_before + 1
    # Nothing leaked: the next request is served normally by the same worker.
    response = httpx.post(
        f"{stack.url}/v1/audio/speech",
        json=speech_body(response_format="pcm"),
        headers={"x-sla-class": "latency"},
        timeout=60,
    )
    assert response.status_code == 200 and response.headers["x-gateway-pool"] == "low_latency"
    wait_idle(stack.url, [ll, stack.workers["high_throughput"][0].url], timeout=30)
