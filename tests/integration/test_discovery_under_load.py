"""Discovery under load: workers join and leave a pool, and DNS or the API server fails,
while clients stream speech through the gateway, without a single failed request.

Real processes and sockets: three emulated workers (one low-latency, two
high-throughput), each on its own loopback address and all on one port, like pods behind
a headless Service. The gateway runs in this process under uvicorn; its discovery is
fed by a fake DNS resolver (``dns`` mode) or a fake API server serving EndpointSlices over
HTTP on 127.0.0.1 to the real client (``kubernetes`` mode), which the test edits while eight clients (httpx and the official
``openai`` client) stream PCM. One scenario per mode:

1. steady load on ``ll`` and ``ht-a``, with a voice uploaded through the gateway;
2. ``ht-b`` joins (in ``kubernetes`` mode first as a not-ready endpoint, which must not
   be added): routable only once it has the voice and the warm-up is done (all its
   requests completed, graphs captured for batches no client load here could make),
   never holding a lease or serving a request before; then it serves traffic;
3. discovery fails for several periods (DNS: NXDOMAIN, OSError, empty answer, hang;
   API server: watch cut, lists answered 503, then 410 Gone): the pools do not change;
4. ``ht-a`` leaves while requests run on it: they finish with complete audio, and no
   request sent after its removal reaches it.

Throughout: every response is 200 with exactly the audio the worker makes for that
text and voice, ``/ready`` stays 200, no worker is ejected, no retry or upstream error
is counted; at the end every in-flight count is back to 0 and the gateway stops cleanly
(discovery's stop() must not hang).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import itertools
import logging
import os
import random
import socket
import subprocess
import threading
import time
import wave
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
import openai
import pytest
from lightkube import AsyncClient

from gateway.access_log import ACCESS_LOGGER
from gateway.app import create_app
from gateway.config import GatewayConfig, PoolConfig
from gateway.pools.discovery import Discovery, create_discovery
from gateway.pools.fleet import Fleet
from gateway.pools.warmup import default_batch_sizes
from gateway.types import PoolName
from tests.integration.conftest import (
    ADMIN,
    LONG_TEXT,
    SHORT_TEXT,
    metric,
    serving_in_thread,
    set_faults,
    wait_until,
    worker_load,
    worker_pcm,
)
from tests.support.kube_api import FakeKubeApi
from tests.support.procs import Proc, emulator_args, free_port, wait_http
from tests.support.stack import HT_PROFILE, LL_PROFILE

TIME_SCALE = 0.1  # a LONG_TEXT stream lasts about a second: long enough to be caught in flight
INTERVAL_S = 0.2  # DNS re-resolution period / API retry period
MEDIUM_TEXT = " ".join([SHORT_TEXT] * 3)
VOICE = "narrator"
HT_WARMUP_SIZES = default_batch_sizes(PoolName.HIGH_THROUGHPUT, 64)  # the HT profile's max_num_seqs
HT_WARMUP_REQUESTS = sum(HT_WARMUP_SIZES)
LL_WARMUP_REQUESTS = sum(default_batch_sizes(PoolName.LOW_LATENCY, 16))


# ---- the outside world discovery reads: a DNS name, or a Service's EndpointSlices --------


class Source(Protocol):
    """What a platform publishes about one pool's workers, edited by the test."""

    def starting(self, address: str) -> None: ...  # a pod that exists but is not ready
    def publish(self, address: str) -> None: ...  # ready
    def withdraw(self, address: str) -> None: ...  # terminating
    def outage(self, down: bool) -> None: ...
    def outage_hits(self) -> int: ...  # failed look-ups so far
    def good_lookups(self) -> int: ...  # successful resolutions / lists so far
    def settle(self) -> None: ...  # until discovery has acted on everything published


class DnsName:
    """The A records behind one headless-Service name; during an outage every resolution
    fails in turn as NXDOMAIN, a network error, an empty answer and a hang."""

    FAILURES = ("nxdomain", "oserror", "empty", "hang")

    def __init__(self, name: str, port: int) -> None:
        self.name = name
        self.port = port
        self._lock = threading.Lock()
        self._addresses: list[str] = []
        self._failures: Iterator[str] | None = None
        self.calls = 0
        self.failed = 0

    def starting(self, address: str) -> None:
        pass  # a headless Service publishes ready pods only

    def publish(self, address: str) -> None:
        with self._lock:
            self._addresses = sorted({*self._addresses, address})

    def withdraw(self, address: str) -> None:
        with self._lock:
            self._addresses = [a for a in self._addresses if a != address]

    def outage(self, down: bool) -> None:
        with self._lock:
            self._failures = itertools.cycle(self.FAILURES) if down else None

    def outage_hits(self) -> int:
        return self.failed

    def good_lookups(self) -> int:
        return self.calls - self.failed

    def settle(self) -> None:
        # Resolutions run one after another: two more calls mean the earlier one's answer
        # has been reconciled.
        mark = self.calls
        wait_until(lambda: self.calls >= mark + 2, 20, f"{self.name} re-resolved")

    async def resolve(self, name: str, port: int) -> list[str]:
        assert (name, port) == (self.name, self.port), (name, port)
        with self._lock:
            self.calls += 1
            failure = next(self._failures) if self._failures is not None else None
            addresses = list(self._addresses)
        if failure is not None:
            self.failed += 1
        if failure == "nxdomain":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if failure == "oserror":
            raise OSError("Network is unreachable")
        if failure == "empty":
            return []
        if failure == "hang":
            await asyncio.sleep(3600)  # discovery gives up after interval_s
        return addresses


class EndpointSlices:
    """One Service's EndpointSlice on a fake API server (its own thread, real HTTP on
    127.0.0.1), which discovery lists and watches through its real client.

    The watches end at discovery's deadline and it re-lists, under load too. During an
    outage lists answer 503 and the open watch is cut mid-stream; the first watch after
    it answers 410 Gone (its version expired meanwhile), so discovery re-lists again.
    """

    def __init__(self, server: FakeKubeApi, service: str, port: int) -> None:
        self.server = server
        self.service = service
        self.namespace = server.namespace
        self.port = port
        self._lock = threading.Lock()
        self._endpoints: dict[str, str] = {}  # address -> starting | ready | terminating

    def client(self) -> AsyncClient:
        return self.server.client()

    def _set(self, address: str, phase: str) -> None:
        with self._lock:
            self._endpoints[address] = phase
            item = self._slice()
        self.server.call(self.server.put, "endpointslices", item)

    def pod_name(self, address: str) -> str:
        return f"{self.service}-{address.replace('.', '-')}"

    def starting(self, address: str) -> None:
        self._set(address, "starting")

    def publish(self, address: str) -> None:
        self._set(address, "ready")

    def withdraw(self, address: str) -> None:
        self._set(address, "terminating")

    def outage(self, down: bool) -> None:
        self.server.call(self.server.outage, down)
        if not down:
            self.server.call(self.server.expire_next_watch)

    def outage_hits(self) -> int:
        return self.server.failures

    def good_lookups(self) -> int:
        return self.server.listed

    def settle(self) -> None:
        # Discovery watches from a list's version only after reconciling that list.
        version = self.server.version
        wait_until(lambda: self.server.last_watched_version() >= version, 20, f"{self.service} version {version} applied")

    def _slice(self) -> dict[str, Any]:
        endpoints = [
            {
                "addresses": [address],
                "conditions": {
                    "ready": phase == "ready", "serving": phase != "starting", "terminating": phase == "terminating"
                },
                "targetRef": {"kind": "Pod", "namespace": self.namespace, "name": self.pod_name(address)},
            }
            for address, phase in sorted(self._endpoints.items())
        ]
        return {
            "metadata": {"name": f"{self.service}-x7k2p", "labels": {"kubernetes.io/service-name": self.service}},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "http", "port": self.port, "protocol": "TCP"}],
        }  # fmt: skip


# ---- processes and the in-process gateway ---------------------------------------------


@dataclass
class Member:
    name: str
    pool: PoolName
    host: str
    proc: Proc

    @property
    def url(self) -> str:
        return self.proc.url


def loopback_hosts(count: int) -> tuple[list[str], int]:
    """``count`` loopback addresses (Linux routes all of 127/8 to lo) sharing one free port."""
    for _ in range(20):
        prefix = f"127.{random.randint(100, 250)}.{random.randint(0, 255)}"
        hosts = [f"{prefix}.{i}" for i in range(2, 2 + count)]
        port = free_port()
        try:
            for host in hosts:
                with socket.socket() as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return hosts, port
    raise RuntimeError("no free port on the loopback addresses")


@contextmanager
def emulated_workers(
    tmp_path: Path, port: int, specs: list[tuple[str, PoolName, str, list[str]]]
) -> Iterator[dict[str, Member]]:
    """Start every worker at once (start-up dominates), then wait for each one's /health."""
    members: dict[str, Member] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        for name, pool, host, extra in specs:
            profile = LL_PROFILE if pool is PoolName.LOW_LATENCY else HT_PROFILE
            voices = str(tmp_path / f"{name}-voices")
            args = emulator_args(port, profile, TIME_SCALE, [*extra, "--host", host, "--voices-dir", voices])
            log_path = tmp_path / f"{name}.log"
            with log_path.open("wb") as log:
                popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            members[name] = Member(name, pool, host, Proc(popen, f"http://{host}:{port}", log_path))
        for member in members.values():
            wait_http(f"{member.url}/health", 60, member.proc.popen, member.proc.log_path)
        yield members
    finally:
        for member in members.values():
            member.proc.stop()


@contextmanager
def gateway_in_process(config: GatewayConfig, factory: Callable[[PoolName, PoolConfig, Fleet], Discovery]) -> Iterator[str]:
    with serving_in_thread(create_app(config, discovery_factory=factory), config.server.port) as url:
        yield url


@dataclass(frozen=True)
class Access:
    at: float  # monotonic, when the gateway finished the request
    request_id: str
    status: int
    pool: str | None
    worker: str | None


class AccessCapture(logging.Handler):
    """The gateway's access log (one record per speech request: which worker, which status)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[Access] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = record.__dict__
        if fields.get("path") == "/v1/audio/speech":
            access = Access(time.monotonic(), fields["request_id"], fields["status"], fields.get("pool"), fields.get("worker"))
            self.records.append(access)

    def by_request(self) -> dict[str, Access]:
        return {record.request_id: record for record in list(self.records)}


@contextmanager
def capturing_access_log() -> Iterator[AccessCapture]:
    logger = logging.getLogger(ACCESS_LOGGER)
    handler, level = AccessCapture(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# ---- load ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Client:
    name: str
    kind: str  # httpx | openai
    sla_class: str
    text: str
    voice: str


CLIENTS = (
    Client("http-lat-0", "httpx", "latency", SHORT_TEXT, "alloy"),
    Client("http-lat-1", "httpx", "latency", MEDIUM_TEXT, VOICE),
    Client("http-bal-2", "httpx", "balanced", MEDIUM_TEXT, "alloy"),
    Client("http-thr-3", "httpx", "throughput", LONG_TEXT, VOICE),
    Client("http-thr-4", "httpx", "throughput", LONG_TEXT, "alloy"),
    Client("http-thr-5", "httpx", "throughput", LONG_TEXT, VOICE),
    Client("sdk-thr-6", "openai", "throughput", LONG_TEXT, VOICE),
    Client("sdk-lat-7", "openai", "latency", SHORT_TEXT, "alloy"),
)


@dataclass
class Result:
    client: Client
    request_id: str
    sent_at: float
    status: int | None = None
    pool: str | None = None
    received: int = 0
    digest: bytes | None = None  # sha256 of the audio
    error: str | None = None


class Load:
    """Closed-loop streaming clients, one thread each, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[Result] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(c,), name=c.name, daemon=True) for c in CLIENTS]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(90)
        assert not any(t.is_alive() for t in self._threads), "a client is stuck"

    def done(self, since: float = 0.0) -> list[Result]:
        return [r for r in list(self.results) if r.sent_at >= since]

    def _run(self, client: Client) -> None:
        # Each client its own Timeout type: openai 3.63 moved to httpx2, which refuses httpx's.
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=5.0)) as http, openai.OpenAI(
            base_url=f"{self.url}/v1", api_key="unused", max_retries=0, timeout=openai.Timeout(60.0, connect=5.0)
        ) as sdk:
            for n in itertools.count():
                if self._stop.is_set():
                    return
                result = Result(client, f"{client.name}.{n}", time.monotonic())
                try:
                    if client.kind == "openai":
                        self._openai(sdk, client, result)
                    else:
                        self._httpx(http, client, result)
                except openai.APIStatusError as exc:
                    result.status, result.error = exc.status_code, str(exc)[:300]
                except Exception as exc:  # noqa: BLE001 - recorded and asserted on
                    result.error = f"{type(exc).__name__}: {exc}"[:300]
                self.results.append(result)

    def _httpx(self, http: httpx.Client, client: Client, result: Result) -> None:
        body = {"model": "tts-1", "voice": client.voice, "input": client.text, "response_format": "pcm"}
        headers = {"x-request-id": result.request_id, "x-sla-class": client.sla_class}
        with http.stream("POST", f"{self.url}/v1/audio/speech", json=body, headers=headers) as response:
            result.status, result.pool = response.status_code, response.headers.get("x-gateway-pool")
            if response.status_code != 200:
                result.error = response.read().decode(errors="replace")[:300]
                return
            self._consume(response.iter_bytes(), result)

    def _openai(self, sdk: openai.OpenAI, client: Client, result: Result) -> None:
        headers = {"x-request-id": result.request_id, "x-sla-class": client.sla_class}
        with sdk.audio.speech.with_streaming_response.create(
            model="tts-1", voice=client.voice, input=client.text, response_format="pcm", extra_headers=headers
        ) as response:
            result.status, result.pool = response.status_code, response.headers.get("x-gateway-pool")
            self._consume(response.iter_bytes(), result)

    @staticmethod
    def _consume(chunks: Iterator[bytes], result: Result) -> None:
        digest = hashlib.sha256()
        for chunk in chunks:  # raises if the stream is cut before its chunked terminator
            digest.update(chunk)
            result.received += len(chunk)
        result.digest = digest.digest()


# ---- watching the gateway --------------------------------------------------------------


@dataclass
class Observation:
    at: float
    workers: dict[str, dict[str, Any]]  # worker id -> its /admin/pools entry
    ready: int


def pools_now(url: str) -> Observation:
    with httpx.Client(timeout=10) as http:
        return observe(url, http)


def observe(url: str, http: httpx.Client) -> Observation:
    at = time.monotonic()
    body = http.get(f"{url}/admin/pools", headers=ADMIN).json()
    workers = {w["id"]: w for pool in body["pools"].values() for w in pool["workers"]}
    return Observation(at, workers, http.get(f"{url}/ready").status_code)


class Monitor:
    """Polls /admin/pools and /ready all along and records every invariant broken."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.observations: list[Observation] = []
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def between(self, start: float, end: float) -> list[Observation]:
        return [o for o in list(self.observations) if start <= o.at <= end]

    def _run(self) -> None:
        was_routable: set[str] = set()
        gone: set[str] = set()
        listed: set[str] = set()
        with httpx.Client(timeout=10) as http:
            while not self._stop.wait(0.05):
                seen = observe(self.url, http)
                self.observations.append(seen)
                problems = [] if seen.ready == 200 else [f"/ready answered {seen.ready}"]
                for worker_id, entry in seen.workers.items():
                    if entry["state"] not in ("starting", "ready"):
                        problems.append(f"{worker_id} is {entry['state']}: {entry['last_error']}")
                    if not entry["routable"] and entry["inflight"]:
                        problems.append(f"{worker_id} holds {entry['inflight']} lease(s) while not routable")
                    if worker_id in was_routable and not entry["routable"]:
                        problems.append(f"{worker_id} stopped being routable")
                    if worker_id in gone:
                        problems.append(f"{worker_id} came back after leaving")
                    if entry["routable"]:
                        was_routable.add(worker_id)
                gone |= listed - seen.workers.keys()
                listed = set(seen.workers)
                self.violations += [f"t={seen.at:.2f}: {p}" for p in problems]


def worker_metrics(url: str) -> str:
    return httpx.get(f"{url}/metrics", timeout=10).text


def success_count(url: str) -> int:
    return int(metric(worker_metrics(url), "vllm_omni:requests_success_total", finished_reason="stop"))


def captured_sizes(metrics_text: str) -> set[int]:
    sizes = set()
    for line in metrics_text.splitlines():
        if line.startswith("higgs_emulator_graph_captures_total{") and float(line.rsplit(" ", 1)[1]) > 0:
            sizes.add(int(line.split('batch_size="', 1)[1].split('"', 1)[0]))
    return sizes


def held_requests(url: str) -> int:
    """Requests the worker holds before generating (hang fault): in /load, not in the engine."""
    text = worker_metrics(url)
    engine = sum(
        metric(text, name, **labels)
        for name, labels in (
            ("vllm_omni:num_requests_running", {}),
            ("vllm_omni:num_requests_waiting", {}),
            ("vllm:num_requests_running", {"stage": "1"}),  # audio still being decoded
        )
    )
    return worker_load(url) if engine == 0 else 0  # /load read after the engine was idle


def worker_voices(url: str) -> set[str]:
    response = httpx.get(f"{url}/v1/audio/voices", timeout=10)
    assert response.status_code == 200, response.text
    return {v["name"] for v in response.json()["uploaded_voices"]}


def reference_wav(seconds: float = 2.5, pitch_hz: float = 160.0) -> bytes:
    rate = 24_000
    t = np.arange(int(seconds * rate)) / rate
    signal = np.sin(2 * np.pi * pitch_hz * t) * 0.5 * (1 - np.cos(2 * np.pi * 3.0 * t)) * 0.4
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((signal * 32767).astype("<i2").tobytes())
    return buffer.getvalue()


# ---- the scenario ----------------------------------------------------------------------


@dataclass
class World:
    sources: dict[PoolName, Source]
    discovery: dict[str, Any] = field(default_factory=dict)  # per-pool discovery config

    def factory(self, pool: PoolName, config: PoolConfig, sink: Fleet) -> Discovery:
        source = self.sources[pool]
        if isinstance(source, DnsName):
            return create_discovery(pool, config, sink, resolver=source.resolve)
        return create_discovery(pool, config, sink, kube_api=source.client())


def worker_identity(world: World, pool: PoolName, host: str, port: int) -> str:
    source = world.sources[pool]
    if isinstance(source, EndpointSlices):
        return source.pod_name(host)
    return f"{host}:{port}"


def build_world(mode: str, port: int, servers: dict[PoolName, FakeKubeApi]) -> World:
    services = {PoolName.LOW_LATENCY: "higgs-worker-low-latency", PoolName.HIGH_THROUGHPUT: "higgs-worker-high-throughput"}
    if mode == "dns":
        names = {pool: f"{service}.higgs.svc" for pool, service in services.items()}
        world = World({pool: DnsName(name, port) for pool, name in names.items()})
        world.discovery = {
            pool.value: {"mode": "dns", "dns_name": name, "port": port, "interval_s": INTERVAL_S}
            for pool, name in names.items()
        }
        return world
    world = World({pool: EndpointSlices(servers[pool], service, port) for pool, service in services.items()})
    world.discovery = {
        pool.value: {
            "mode": "kubernetes", "service": service, "namespace": "higgs", "port": port,
            "interval_s": INTERVAL_S, "watch_timeout_s": 2.0,  # watches end (and re-list) under load too
        }
        for pool, service in services.items()
    }  # fmt: skip
    return world


@pytest.fixture
def kube_servers() -> Iterator[dict[PoolName, FakeKubeApi]]:
    """A fake API server per pool, each on its own thread: one pool's outage is its own."""
    with FakeKubeApi("higgs").in_thread() as ll, FakeKubeApi("higgs").in_thread() as ht:
        yield {PoolName.LOW_LATENCY: ll, PoolName.HIGH_THROUGHPUT: ht}


@pytest.mark.parametrize("mode", ["dns", "kubernetes"])
def test_workers_join_and_leave_under_load_without_a_failed_request(
    mode: str, tmp_path: Path, kube_servers: dict[PoolName, FakeKubeApi]
) -> None:
    (ll_host, a_host, b_host), port = loopback_hosts(3)
    world = build_world(mode, port, kube_servers)
    ll_source, ht_source = world.sources[PoolName.LOW_LATENCY], world.sources[PoolName.HIGH_THROUGHPUT]
    config = GatewayConfig(
        server={"host": "127.0.0.1", "port": free_port()},
        data_dir=tmp_path / "gateway-data",
        pools={
            "low_latency": {"profile": LL_PROFILE, "discovery": world.discovery["low_latency"]},
            "high_throughput": {"profile": HT_PROFILE, "discovery": world.discovery["high_throughput"]},
        },
        health={"interval_s": 0.5, "half_open_after_s": 1.0},
        load_reports={"interval_s": 0.25, "stale_after_s": 2.0},
        auth={"admin_token": ADMIN["Authorization"].removeprefix("Bearer ")},
        # Discovery is under test, not prediction: the rules policy spreads requests over
        # ht-a and ht-b by free slots, which the join phase counts on. How the adaptive
        # policy treats a worker that joins (it looks like its peers until it has samples)
        # is tested in tests/unit/routing/test_performance.py.
        routing={"policy": "rules"},
    )
    specs = [
        ("ll", PoolName.LOW_LATENCY, ll_host, []),
        ("ht-a", PoolName.HIGH_THROUGHPUT, a_host, ["--warm"]),
        ("ht-b", PoolName.HIGH_THROUGHPUT, b_host, []),  # cold: its graphs come from the warm-up
    ]
    ll_source.publish(ll_host)
    ht_source.publish(a_host)
    with emulated_workers(tmp_path, port, specs) as members, capturing_access_log() as access, gateway_in_process(
        config, world.factory
    ) as url:
        ll, ht_a, ht_b = members["ll"], members["ht-a"], members["ht-b"]
        wait_http(f"{url}/ready?require=every_pool", 60)
        # DNS knows addresses only; Kubernetes names each worker by its pod.
        ids = {m.name: f"{m.pool.value}@{worker_identity(world, m.pool, m.host, port)}" for m in members.values()}
        assert set(pools_now(url).workers) == {ids["ll"], ids["ht-a"]}

        upload = httpx.post(
            f"{url}/v1/audio/voices",
            data={"name": VOICE, "consent": "true"},
            files={"audio_sample": (f"{VOICE}.wav", reference_wav(), "audio/wav")},
            timeout=60,
        )
        assert upload.status_code == 200, upload.text
        assert VOICE in worker_voices(ll.url) and VOICE in worker_voices(ht_a.url)
        assert VOICE not in worker_voices(ht_b.url), "ht-b is not in the fleet yet"
        # The exact audio each (text, voice) makes, asked from a worker directly.
        expected = {
            (text, voice): hashlib.sha256(worker_pcm(ll.url, text, **({} if voice == "alloy" else {"voice": voice}))).digest()
            for text, voice in {(c.text, c.voice) for c in CLIENTS}
        }

        with Monitor(url) as monitor, Load(url) as load:
            # 1. steady load on ll + ht-a
            everyone = {c.name for c in CLIENTS}
            wait_until(lambda: {r.client.name for r in load.done() if r.status == 200} == everyone, 60, "every client served")

            # 2. ht-b joins
            if mode == "kubernetes":
                ht_source.starting(b_host)
                ht_source.settle()
                assert ids["ht-b"] not in pools_now(url).workers, "a not-ready endpoint was added"
            ht_source.publish(b_host)
            states_before_routable: list[str] = []
            with httpx.Client(timeout=10) as http:
                deadline = time.monotonic() + 90
                while True:
                    assert time.monotonic() < deadline, f"ht-b not routable; seen {states_before_routable}"
                    completed = metric(worker_metrics(ht_b.url), "vllm_omni:requests_success_total", finished_reason="stop")  # read first
                    entry = observe(url, http).workers.get(ids["ht-b"])
                    if entry is not None and entry["routable"]:
                        break
                    if entry is not None:  # so `completed` was read while ht-b was not routable
                        states_before_routable.append(entry["state"])
                        assert entry["inflight"] == 0, entry
                        assert completed <= HT_WARMUP_REQUESTS, f"ht-b served {completed} requests before it was routable"
                    time.sleep(0.02)
            assert states_before_routable and set(states_before_routable) == {"starting"}, states_before_routable
            assert VOICE in worker_voices(ht_b.url), "ht-b became routable before the voice was replayed to it"
            # The warm-up ran first: all its requests completed, and the worker captured graphs
            # for batches larger than all our clients together could make. (At this time scale a
            # burst of N rarely decodes as one batch of exactly N: its first requests finish
            # while the last still connect; on real time it does.)
            wait_until(lambda: success_count(ht_b.url) >= HT_WARMUP_REQUESTS, 10, "warm-up requests completed")
            warmed = captured_sizes(worker_metrics(ht_b.url))
            assert 1 in warmed and max(warmed) > len(CLIENTS), f"graph captures on ht-b: {sorted(warmed)}"
            wait_until(
                lambda: sum(1 for a in access.records if a.worker == ids["ht-b"] and a.status == 200) >= 3,
                60,
                "ht-b serves traffic",
            )
            assert success_count(ht_b.url) >= HT_WARMUP_REQUESTS + 3

            # 3. discovery fails for a while
            members_now = set(monitor.observations[-1].workers)
            assert members_now == {ids["ll"], ids["ht-a"], ids["ht-b"]}, members_now
            outage_start = time.monotonic()
            for source in (ll_source, ht_source):
                source.outage(True)
            hits = 2 * len(DnsName.FAILURES)
            wait_until(lambda: min(ll_source.outage_hits(), ht_source.outage_hits()) >= hits, 30, "failed look-ups")
            marks = [(source, source.good_lookups()) for source in (ll_source, ht_source)]
            for source, _ in marks:
                source.outage(False)
            for source, mark in marks:  # DNS answers again; the API server is re-listed (after a 410)
                wait_until(lambda source=source, mark=mark: source.good_lookups() >= mark + 2, 30, "discovery recovered")
            outage_end = time.monotonic()
            during = monitor.between(outage_start, outage_end)
            assert during and all(
                set(o.workers) == members_now and all(w["routable"] for w in o.workers.values()) for o in during
            ), "the pools changed while discovery failed"
            assert any(r.status == 200 for r in load.done(outage_start) if r.sent_at <= outage_end)

            # 4. ht-a leaves while it carries requests. To have some there for sure, ht-a holds
            # new requests before their first byte until they are released after its removal:
            # they then stream their whole audio from a worker the gateway no longer lists.
            set_faults(ht_a.url, hang_seconds=60)
            wait_until(lambda: held_requests(ht_a.url) >= 1, 60, "requests held on ht-a")
            ht_source.withdraw(a_host)
            wait_until(lambda: ids["ht-a"] not in monitor.observations[-1].workers, 30, "ht-a removed")
            removed_at = time.monotonic()
            on_it = worker_load(ht_a.url)
            assert on_it >= 1, "nothing was left running on ht-a when it was removed"
            set_faults(ht_a.url, clear=True)
            wait_until(lambda: worker_load(ht_a.url) == 0, 60, "ht-a finished its requests")
            ht_a_served = success_count(ht_a.url)
            wait_until(
                lambda: sum(1 for r in load.done(removed_at) if r.status == 200 and r.pool == "high_throughput") >= 4,
                60,
                "high-throughput traffic after the removal",
            )
        assert not monitor.violations, "\n".join(monitor.violations[:20])

        # Every response: 200, the stream ended cleanly, exactly the worker's audio.
        results = load.results
        failed = [r for r in results if r.status != 200 or r.error or r.digest != expected[r.client.text, r.client.voice]]
        assert not failed, "\n".join(f"{r.request_id}: {r.status} {r.error} {r.received} bytes" for r in failed[:10])
        assert all(r.received > 0 and r.received % 2 == 0 for r in results)
        assert {r.pool for r in results} == {"low_latency", "high_throughput"}
        by_request = access.by_request()
        served_by = {r.request_id: by_request[r.request_id].worker for r in results}

        # The leaver: its running requests finished (complete, above); nothing new reached it.
        finishing = [a for a in access.records if a.worker == ids["ht-a"] and a.at >= removed_at]
        assert len(finishing) >= on_it and all(a.status == 200 for a in finishing)
        late = [r.request_id for r in results if r.sent_at >= removed_at and served_by[r.request_id] == ids["ht-a"]]
        assert not late, f"sent to ht-a after its removal: {late}"
        assert success_count(ht_a.url) == ht_a_served
        # The joiner took traffic (x-gateway-pool says high_throughput for all of it).
        on_b = [r for r in results if served_by[r.request_id] == ids["ht-b"]]
        assert on_b and {r.pool for r in on_b} == {"high_throughput"}

        # Every request a worker completed is a warm-up, one of our references, or a request
        # the gateway logged: nothing reached a worker behind the gateway's back.
        direct = {"ll": LL_WARMUP_REQUESTS + len(expected), "ht-a": HT_WARMUP_REQUESTS, "ht-b": HT_WARMUP_REQUESTS}
        for name, member in members.items():
            text = worker_metrics(member.url)
            served = sum(1 for worker in served_by.values() if worker == ids[name])
            assert metric(text, "vllm_omni:requests_success_total", finished_reason="stop") == direct[name] + served, name
            assert metric(text, "vllm_omni:requests_failed_total") == 0, name
            assert metric(text, "vllm_omni:speech_stream_aborted_total") == 0, name

        # No failure was hidden by a retry, no worker ejected, nobody turned away.
        gateway_metrics = httpx.get(f"{url}/metrics", timeout=10).text
        for name in ("upstream_errors_total", "retries_total", "worker_ejections_total", "rejections_total"):
            assert metric(gateway_metrics, f"higgs_gateway_{name}") == 0, name

        # Everything in flight is back to 0: the gateway's leases and every worker's /load.
        wait_until(
            lambda: all(w["inflight"] == 0 for w in pools_now(url).workers.values())
            and all(worker_load(m.url) == 0 for m in members.values()),
            30,
            "in-flight back to 0",
        )
        final = pools_now(url)
        assert set(final.workers) == {ids["ll"], ids["ht-b"]} and all(w["routable"] for w in final.workers.values())
