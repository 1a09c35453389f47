"""Bad input only a socket can send, property-based: huge headers, trickled or abandoned heads
and bodies (speech requests and voice uploads), API keys in query strings (HTTP and the WebSocket handshake). The gateway answers
every one within its server bounds, never with a 5xx, and no key reaches any log line.

The in-process gateway of ``tests/unit/fuzz_support.py`` is also served by uvicorn on a
127.0.0.1 socket with the bounds ``serve`` runs with (``fuzz_support.served``); every
exchange has a deadline, so a hang is a failure.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import InvalidHandshake
from websockets.sync.client import connect

from gateway.access_log import configure_logging
from tests.unit.fuzz_support import (
    API_KEY,
    BODY_TIMEOUT_S,
    CALL_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MAX_HEADER_BYTES,
    InProcessGateway,
    examples,
    in_process_gateway,
    served,
)

SOCKET_FUZZ = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Shapes that wait out a deadline cost a second or two each: fewer of them.
SLOW_FUZZ = settings(SOCKET_FUZZ, max_examples=examples(6))
PATHS = ["/health", "/v1/models", "/v1/audio/voices", "/v1/audio/speech", "/admin/pools", "/nowhere", "/metrics"]
# Slack between the two ways the head is counted (exact header lines, raw reads): a head this
# close to the limit may go either way.
MARGIN = 64
KEY_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessGateway]:
    with in_process_gateway(tmp_path_factory.mktemp("fuzz-server")) as running:
        yield running


@pytest.fixture(scope="module")
def site(gw: InProcessGateway) -> Iterator[str]:
    with served(gw) as url:
        yield url


@pytest.fixture(scope="module")
def log_text() -> Iterator[io.StringIO]:
    """Everything every logger writes while the module runs, through the gateway's handler."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("DEBUG", stream=stream)
    try:
        yield stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def exchange(url: str, data: bytes, *, then_wait: bool = True) -> bytes | None:
    """Send ``data`` on a fresh connection; everything the server sends back until it closes.
    None: the connection was reset before any answer (a refusal while we were still sending)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT_S - 5) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        chunks: list[bytes] = []
        try:
            while then_wait and (chunk := sock.recv(65536)):
                chunks.append(chunk)
        except ConnectionResetError:
            if not chunks:
                return None
        except TimeoutError:
            raise AssertionError(f"no answer within {CALL_TIMEOUT_S - 5} s: a hang") from None
    return b"".join(chunks)


def first_status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def tallied(gw: InProcessGateway, method: str, path: str, answer: bytes | None) -> int | None:
    status = first_status(answer) if answer else None
    if answer is not None:  # a reset after a refusal is not a hang
        gw.tally.record(method, path, status)
    return status


def head_size(path: str, headers: list[tuple[str, str]]) -> int:
    """The head as the server counts it: the target, then each header line's name, value, ': ', CRLF."""
    return len(path) + sum(len(name) + len(value) + 4 for name, value in headers)


@SOCKET_FUZZ
@given(
    path=st.sampled_from(PATHS),
    sizes=st.lists(st.integers(0, MAX_HEADER_BYTES * 2), min_size=1, max_size=5),
    name=st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=20),
)
def test_any_header_size_is_answered_and_only_a_head_over_the_limit_refused(
    gw: InProcessGateway, site: str, path: str, sizes: list[int], name: str
) -> None:
    headers = [("host", "fuzz"), ("authorization", f"Bearer {API_KEY}"), ("connection", "close")]
    headers += [(f"x-{name}-{index}", "v" * size) for index, size in enumerate(sizes)]
    lines = "".join(f"{key}: {value}\r\n" for key, value in headers)
    answer = exchange(site, f"GET {path} HTTP/1.1\r\n{lines}\r\n".encode())
    status = tallied(gw, "GET", path, answer)
    size = head_size(path, headers)
    if size > MAX_HEADER_BYTES:
        assert status in (431, None), f"{size} bytes of head -> {status}"  # None: refused, reset mid-send
    elif size < MAX_HEADER_BYTES - MARGIN:
        assert status is not None and status not in (431,) and status < 500, f"{size} bytes of head -> {status}"
    if status == 431:
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "header_fields_too_large"


@SLOW_FUZZ
@given(cut=st.integers(0, 60))
def test_a_head_that_stops_is_cut_off_after_the_header_deadline(gw: InProcessGateway, site: str, cut: int) -> None:
    head = f"POST /v1/audio/speech HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer {API_KEY}\r\n".encode()[:cut]
    started = time.monotonic()
    answer = exchange(site, head)
    waited = time.monotonic() - started
    assert waited < HEADER_TIMEOUT_S + 10, f"held {waited:.1f} s"
    if cut == 0:
        assert answer == b"", "a connection that sent nothing is closed without an answer"
        return
    status = tallied(gw, "POST", "/v1/audio/speech", answer)
    assert status == 408, f"{cut} bytes of head -> {status}"


UPLOAD_BOUNDARY = "fuzz-stalled"


def stopping_body(path: str, declared: int) -> tuple[bytes, str]:
    """A whole body for ``path`` (a speech request, or a voice upload's form) and its type."""
    if path == "/v1/audio/speech":
        return json.dumps({"model": "tts-1", "voice": "alloy", "input": "x" * declared}).encode(), "application/json"
    form = (
        f'--{UPLOAD_BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n\r\nstalled\r\n'
        f'--{UPLOAD_BOUNDARY}\r\nContent-Disposition: form-data; name="consent"\r\n\r\ntrue\r\n'
        f'--{UPLOAD_BOUNDARY}\r\nContent-Disposition: form-data; name="audio_sample"; filename="a.wav"\r\n'
        f"Content-Type: audio/wav\r\n\r\nRIFF{'x' * declared}\r\n--{UPLOAD_BOUNDARY}--\r\n"
    )
    return form.encode(), f"multipart/form-data; boundary={UPLOAD_BOUNDARY}"


@SLOW_FUZZ
@given(
    path=st.sampled_from(["/v1/audio/speech", "/v1/audio/voices"]),
    declared=st.integers(20, 4000),
    fraction=st.floats(0, 0.95),
    stall=st.booleans(),
)
def test_a_body_that_stops_is_408_or_a_client_gone_never_a_5xx(
    gw: InProcessGateway, site: str, path: str, declared: int, fraction: float, stall: bool
) -> None:
    body, content_type = stopping_body(path, declared)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer {API_KEY}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    sent = head + body[: int(len(body) * fraction)]
    if not stall:  # the client hangs up mid-body: nobody to answer; the gateway must not count a 5xx
        exchange(site, sent, then_wait=False)
        return
    started = time.monotonic()
    answer = exchange(site, sent)
    status = tallied(gw, "POST", path, answer)
    assert status == 408, f"a stalled body -> {status}"
    assert time.monotonic() - started < BODY_TIMEOUT_S + 10


@SOCKET_FUZZ
@given(
    key=st.text(alphabet=KEY_ALPHABET, min_size=8, max_size=48).map(lambda k: f"fz{k}"),
    right=st.booleans(),
    path=st.sampled_from([*PATHS, "/v1/audio/speech/stream"]),
    extra=st.dictionaries(st.sampled_from(["lang", "x", "token2"]), st.text(alphabet=KEY_ALPHABET, max_size=8), max_size=2),
    websocket=st.booleans(),
)
def test_a_key_in_a_query_string_never_reaches_a_log_line(
    gw: InProcessGateway, site: str, log_text: io.StringIO, key: str, right: bool, path: str,
    extra: dict[str, str], websocket: bool,
) -> None:  # fmt: skip
    sent_key = API_KEY if right else key
    query = "&".join([*(f"{name}={quote(value)}" for name, value in extra.items()), f"api_key={sent_key}"])
    if websocket:
        url = site.replace("http://", "ws://") + f"/v1/audio/speech/stream?{query}"
        try:
            with connect(url, open_timeout=CALL_TIMEOUT_S - 5):
                status = 101
        except InvalidHandshake as refused:
            response = getattr(refused, "response", None)
            status = response.status_code if response is not None else 400
        gw.tally.record("GET", "/v1/audio/speech/stream", status)
        assert status < 500 or status == 503, f"handshake -> {status}"  # 503: this replica's session places
    else:
        answer = exchange(site, f"GET {path}?{query} HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n".encode())
        status = tallied(gw, "GET", path, answer)
        assert status is not None and status < 500, f"GET {path}?... -> {status}"
    written = log_text.getvalue()
    for secret in {sent_key, quote(sent_key)}:
        assert secret not in written, [line for line in written.splitlines() if secret in line][:3]


def test_the_socket_shapes_left_no_5xx_behind(gw: InProcessGateway, site: str) -> None:
    """Hang-ups mid-body have no answer to check: the gateway's own count must show no 5xx."""
    metrics = gw.request("GET", "/metrics").text
    server_errors = [
        line for line in metrics.splitlines()
        if line.startswith("higgs_gateway_requests_total{") and 'status="5' in line and not line.endswith(" 0.0")
    ]  # fmt: skip
    assert server_errors == []
