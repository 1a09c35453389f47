"""The whole gateway in one process, with no sockets: for property-based tests of its HTTP
surface (``tests/unit/test_fuzz_*.py``).

``create_app(load_config(...), transport=..., control_client=...)`` runs with its real lifespan (health checks, load reports,
voice replay) on an event loop in a background thread. Its workers are real emulated
workers (``gateway.emulator.app``) called in-process as ASGI apps: the speech relay through
``InProcessUpstream`` (an ``UpstreamTransport`` that streams the app's body as it is sent),
the control plane (probes, ``/load``, voices) through an httpx client whose transport
dispatches by host to ``httpx.ASGITransport``. Tests call the gateway through another
``httpx.ASGITransport``; every call has a deadline, so a hang is a failure, not a stuck run.

The suite runs a bounded number of examples; ``HIGGS_FUZZ_SCALE`` multiplies every
property's count, and ``HIGGS_FUZZ_REPORT=<file>`` makes each gateway write a tally of
what it was sent and answered there (``scripts/fuzz.py`` runs the full-size fuzz with both).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import orjson
from starlette.types import ASGIApp, Message

from gateway.app import GatewayApp, create_app
from gateway.bench.soak import LeakCheck
from gateway.config import DEFAULT_MODEL, load_config
from gateway.worker.profile import load_deploy_profile
from gateway.emulator.app import EmulatorSettings, create_app as create_emulator
from gateway.security.auth import hash_key
from gateway.types import PoolName
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.upstream.errors import UpstreamError
from gateway.upstream.worker_errors import worker_error_message
from tests.support.deadline import within

T = TypeVar("T")
LL_URL = "http://ll.worker.invalid:8091"
HT_URL = "http://ht.worker.invalid:8091"
API_KEY = "sk-fuzz-1d5e9a7c3b2f4e60"
ADMIN_TOKEN = "fuzz-admin-token"
MAX_BODY_BYTES = 16 * 1024
# The served gateway's (``served``) server bounds: small, so the fuzz reaches them quickly.
MAX_HEADER_BYTES = 8 * 1024
HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 2.0
MAX_UPLOAD_BYTES = 80 * 1024
CALL_TIMEOUT_S = 30.0
FUZZ_SCALE = float(os.environ.get("HIGGS_FUZZ_SCALE", "1"))
REPORT_PATH = os.environ.get("HIGGS_FUZZ_REPORT")


def examples(count: int) -> int:
    """A property's example count, times ``HIGGS_FUZZ_SCALE`` for the full-size run."""
    return max(1, round(count * FUZZ_SCALE))


def endpoint_family(method: str, path: str) -> str:
    """A request's endpoint for the tally: known routes by name, anything else as 'other'."""
    for prefix in ("/v1/audio/speech", "/v1/audio/voices", "/v1/audio/models", "/v1/models", "/admin/", "/health",
                   "/ready", "/metrics"):  # fmt: skip
        if path.startswith(prefix):
            return f"{method} {prefix.rstrip('/')}{'*' if prefix.endswith('/') else ''}"
    return f"{method} other"


@dataclass
class Tally:
    """What the fuzz sent and got back: inputs per endpoint, statuses, 5xx and hangs."""

    inputs: int = 0
    server_errors: int = 0
    hangs: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    endpoints: Counter[str] = field(default_factory=Counter)

    def record(self, method: str, path: str, status: int | None) -> None:
        self.inputs += 1
        self.endpoints[endpoint_family(method.upper(), path.split("?", 1)[0])] += 1
        if status is None:
            self.hangs += 1
            self.statuses["hang"] += 1
            return
        self.statuses[str(status)] += 1
        if status >= 500:
            self.server_errors += 1

    def write(self, path: str) -> None:
        """Adds to what an earlier gateway (another test module) wrote to ``path``."""
        try:
            total = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            total = {"inputs": 0, "server_errors": 0, "hangs": 0, "statuses": {}, "endpoints": {}}
        total["inputs"] += self.inputs
        total["server_errors"] += self.server_errors
        total["hangs"] += self.hangs
        for key, counts in (("statuses", self.statuses), ("endpoints", self.endpoints)):
            merged = Counter(total[key])
            merged.update(counts)
            total[key] = dict(sorted(merged.items()))
        Path(path).write_text(json.dumps(total, indent=2) + "\n")


class _Done:
    """Queue sentinel: the app returned (or raised) without finishing its body."""


class _InProcessResponse:
    def __init__(self, app: ASGIApp, url: str, body: bytes, headers: Mapping[str, str], said: list[str]) -> None:
        parts = urlsplit(url)
        extra = [(name.lower().encode(), value.encode()) for name, value in headers.items()]
        self._scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": parts.path, "raw_path": parts.path.encode(), "query_string": b"",
            "headers": [(b"host", parts.netloc.encode()), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()), *extra],
            "server": (parts.hostname, parts.port), "client": ("127.0.0.1", 1), "root_path": "",
        }  # fmt: skip
        self._app = app
        self._body = body
        self._sent_body = False
        self._gone = asyncio.Event()
        self._messages: asyncio.Queue[Message | _Done] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self._said = said

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._app(self._scope, self._receive, self._send))
        self._task.add_done_callback(lambda _t: self._messages.put_nowait(_Done()))
        first = await self._messages.get()
        if isinstance(first, _Done) or first["type"] != "http.response.start":
            raise UpstreamError(UpstreamErrorKind.CONNECT, "the worker app ended before answering")
        self.status = int(first["status"])
        self.headers = {k.decode().lower(): v.decode() for k, v in first.get("headers", [])}

    async def _receive(self) -> Message:
        if not self._sent_body:
            self._sent_body = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        if self._gone.is_set():
            raise OSError("client disconnected")
        await self._messages.put(message)

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            message = await self._messages.get()
            if isinstance(message, _Done):
                raise UpstreamError(UpstreamErrorKind.STREAM_ERROR, "the worker app ended mid-body")
            if message["type"] != "http.response.body":
                continue
            if message.get("body"):
                yield bytes(message["body"])
            if not message.get("more_body", False):
                return

    async def read(self) -> bytes:
        body = b"".join([chunk async for chunk in self.chunks()])
        if self.status != 200:
            self._said.append(worker_error_message(body)[0])  # what no client may be shown
        return body

    async def close(self) -> None:
        self._gone.set()  # the app sees http.disconnect, as after a closed connection
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class InProcessUpstream:
    """``UpstreamTransport`` onto in-process worker apps, keyed by base URL."""

    def __init__(self, apps: dict[str, ASGIApp]) -> None:
        self.apps = apps
        self.worker_messages: list[str] = []  # every error message a worker answered

    async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] = {}) -> _InProcessResponse:
        parts = urlsplit(url)
        app = self.apps.get(f"{parts.scheme}://{parts.netloc}")
        if app is None:
            raise UpstreamError(UpstreamErrorKind.CONNECT, f"no worker at {url}")
        response = _InProcessResponse(app, url, orjson.dumps(body), headers, self.worker_messages)
        await response.start()
        return response

    async def close(self) -> None:
        pass


class HostDispatch(httpx.AsyncBaseTransport):
    """An httpx transport that sends each request to the in-process app for its host."""

    def __init__(self, apps: dict[str, ASGIApp]) -> None:
        self._transports = {base: httpx.ASGITransport(app=app) for base, app in apps.items()}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
        transport = self._transports.get(base)
        if transport is None:
            raise httpx.ConnectError(f"no worker at {base}", request=request)
        return await transport.handle_async_request(request)


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fuzz-loop", daemon=True)
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclass
class InProcessGateway:
    loop: LoopThread
    gateway: GatewayApp
    client: httpx.AsyncClient
    upstream: InProcessUpstream
    tally: Tally = field(default_factory=Tally)

    def leak_check(self) -> LeakCheck:
        """What no error body may contain: the workers' ids and addresses, anything they said."""
        workers = list(self.gateway.fleet.view.workers)
        said = [message for message in self.upstream.worker_messages if len(message) >= 16]
        return LeakCheck.of((w.worker_id for w in workers), (w.url for w in workers), said)

    def request(self, method: str, path: str | httpx.URL, **kwargs: Any) -> httpx.Response:
        """One call with a deadline: a hang fails the test instead of stalling it. Every
        error answer is checked for what it must not give away (``gateway.bench.soak.LeakCheck``)."""
        if isinstance(path, httpx.URL):
            tallied = path.raw_path.decode("ascii", "replace")
        else:
            tallied = path
        try:
            response = self.loop.run(within(CALL_TIMEOUT_S - 5, self.client.request(method, path, **kwargs)))
        except TimeoutError:
            self.tally.record(method, tallied, None)
            raise
        self.tally.record(method, tallied, response.status_code)
        if response.status_code >= 400:
            leak = self.leak_check().find(response.content)
            assert leak is None, f"{method} {tallied} -> {response.status_code} gives away {leak}: {response.text[:300]}"
        return response

    def call(self, work: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await work

        return self.loop.run(wrapped())


def fuzz_config(data_dir: Path) -> dict[str, Any]:
    return {
        "server": {
            "max_body_bytes": MAX_BODY_BYTES,
            "max_header_bytes": MAX_HEADER_BYTES,
            "header_timeout_s": HEADER_TIMEOUT_S,
            "body_timeout_s": BODY_TIMEOUT_S,
        },
        "data_dir": str(data_dir),
        "pools": {
            "low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": [LL_URL]},
            "high_throughput": {"profile": "higgs_multimodal_qwen3_high_throughput.yaml", "workers": [HT_URL]},
        },
        "health": {"interval_s": 0.2},
        "load_reports": {"interval_s": 0.25},
        "voices": {"max_upload_bytes": MAX_UPLOAD_BYTES},
        "auth": {"api_key_sha256": [hash_key(API_KEY)], "admin_token": ADMIN_TOKEN},
        "logging": {"access_log": False},
    }


@contextmanager
def in_process_gateway(tmp: Path) -> Iterator[InProcessGateway]:
    loop = LoopThread()

    upstream = InProcessUpstream({})

    async def build() -> tuple[GatewayApp, httpx.AsyncClient]:
        workers: dict[str, ASGIApp] = {}
        for url, profile, name in ((LL_URL, "higgs_multimodal_qwen3_low_latency.yaml", "ll"),
                                   (HT_URL, "higgs_multimodal_qwen3_high_throughput.yaml", "ht")):  # fmt: skip
            settings = EmulatorSettings(
                model=DEFAULT_MODEL, profile=load_deploy_profile(profile), voices_dir=tmp / f"{name}-voices",
                time_scale=0.002, warm=True,
            )  # fmt: skip
            workers[url] = create_emulator(settings)
        config = load_config(overrides=fuzz_config(tmp / "gateway-data"))
        upstream.apps.update(workers)
        runtime = create_app(
            config,
            transport=upstream,
            control_client=httpx.AsyncClient(transport=HostDispatch(workers)),
        )
        await runtime.start()
        for _ in range(400):  # both workers answer probes, get voices replayed, become routable
            if all(runtime.fleet.view.routable_count(pool) for pool in PoolName):
                break
            await asyncio.sleep(0.025)
        else:
            raise RuntimeError(f"in-process workers never became routable: {runtime.fleet.view.describe()}")
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=runtime), base_url="http://gateway.test")
        return runtime, client

    runtime, client = loop.run(build(), 60)
    try:
        running = InProcessGateway(loop, runtime, client, upstream)
        yield running
        if REPORT_PATH:
            running.tally.write(REPORT_PATH)
    finally:

        async def teardown() -> None:
            await client.aclose()
            await runtime.stop()

        try:
            loop.run(teardown(), 30)
        finally:
            loop.stop()


@contextmanager
def served(gateway: InProcessGateway) -> Iterator[str]:
    """The same in-process gateway also served on a 127.0.0.1 socket by uvicorn with the
    server bounds ``serve`` runs with (``gateway.api.http_limits``): what only a socket can
    send (huge headers, trickled heads and bodies, WebSocket handshakes) reaches it there."""
    import socket

    import uvicorn

    from gateway.api.http_limits import bounded_http_protocol

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        gateway.gateway, host="127.0.0.1", port=port, lifespan="off", log_config=None, access_log=False,
        http=bounded_http_protocol(MAX_HEADER_BYTES, HEADER_TIMEOUT_S, None),
    )  # fmt: skip
    server = uvicorn.Server(config)
    running = asyncio.run_coroutine_threadsafe(server.serve(), gateway.loop.loop)
    for _ in range(400):
        if server.started or running.done():
            break
        threading.Event().wait(0.025)
    if not server.started:
        raise RuntimeError(f"uvicorn did not start: {running.exception() if running.done() else 'still starting'}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        running.result(30)
