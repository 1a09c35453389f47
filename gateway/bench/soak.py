"""Soak: sustained load plus bursts past capacity, and proof that nothing gives way.

A closed loop of ``concurrency`` clients sends ``requests`` speech requests through a
gateway in front of emulated workers, mixing SLA classes and output forms (raw PCM, SSE,
WAV); at evenly spaced points a burst of ``burst_size`` simultaneous requests lands on top,
well past the fleet's slots and the admission queues. A few clients leave mid-stream on
purpose. Then it checks what must hold however hard the gateway is pushed:

* no 5xx from the gateway itself: every refusal is a 429 or 503 that carries
  ``Retry-After`` and the OpenAI error envelope, and nothing else fails;
* no error body names a worker, a worker's address or what a worker said
  (``LeakCheck``, which the fuzz tests use too);
* every accepted request's audio is complete and exactly as long as the emulator makes
  that text (the emulator's length is deterministic: ~15 characters per second);
* when the load stops, every in-flight counter (the gateway's leases, its admission
  queues, each worker's own ``/load``) returns to zero;
* the gateway's resident memory does not grow from the first half of the run to the
  second (both halves carry the same load shape: steady traffic plus the same bursts).

``higgs-gateway bench soak`` runs it on its own emulated fleet and writes a
report; ``run_soak`` runs it against a gateway someone else started (the integration test).

A client's error says what the client needs and nothing more: never a worker's id, a
worker's address, or what a worker answered (the operator finds those in the gateway's
log under the request id). The soak and the fuzz tests run every error body they get
through ``LeakCheck.find``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import random
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import yaml

from gateway.bench.client import KEEPALIVE_S
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE, Fleet, free_port
from gateway.bench.stats import percentile
from gateway.bench.workload import TEXTS, text_order
from gateway.config import GatewayConfig
from gateway.worker.profile import load_deploy_profile
from gateway.help_format import HelpFormatter
from gateway.pools.specs import load_pool_profiles, pool_specs
from gateway.types import SLA_CLASS_HEADER, PoolName
from gateway.types.codec import BYTES_PER_SECOND
from gateway.worker.timing import StepModel

WAV_HEADER_BYTES = 44
CLASSES = ("latency", "balanced", "balanced", "throughput")  # drawn uniformly: balanced twice as often
FORMS = ("pcm", "pcm", "sse", "wav")  # raw PCM stream, SSE (base64 PCM), streamed WAV
DEFAULT_TOKEN = "soak-admin-token"


# ---- what an error body must not give away --------------------------------------------------
# Words only a worker's own error bodies use (vllm-omni 0.30.0 and vLLM: its error types,
# its generation failure, the media fetch errors), never the gateway's.
WORKER_PHRASES = (
    "Speech generation failed",
    "BadRequestError",
    "InternalServerError",
    "NotFoundError",
    "UnprocessableEntityError",
    "Failed to fetch media",
    "Cannot connect to host",
    "Maximum file size exceeded",
)


@dataclass(frozen=True)
class LeakCheck:
    worker_ids: tuple[str, ...] = ()
    worker_urls: tuple[str, ...] = ()
    upstream_messages: tuple[str, ...] = ()  # what the workers were seen answering, when known

    @classmethod
    def of(cls, worker_ids: Iterable[str], worker_urls: Iterable[str], upstream_messages: Iterable[str] = ()) -> LeakCheck:
        return cls(tuple(worker_ids), tuple(worker_urls), tuple(upstream_messages))

    def find(self, body: bytes | str) -> str | None:
        """What leaked into ``body``, or None."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        for worker_id in self.worker_ids:
            if worker_id and worker_id in text:
                return f"worker id {worker_id!r}"
        for url in self.worker_urls:
            netloc = urlsplit(url).netloc
            if netloc and netloc in text:
                return f"worker address {netloc!r}"
        for phrase in (*WORKER_PHRASES, *self.upstream_messages):
            if phrase and phrase in text:
                return f"upstream text {phrase[:80]!r}"
        return None


@dataclass(frozen=True)
class SoakPlan:
    requests: int = 2000  # steady-loop requests (bursts come on top)
    concurrency: int = 64
    burst_size: int = 256
    bursts: int = 4  # even: the same number lands in each half of the run
    abandon_every: int = 40  # every Nth steady request leaves after its first audio (0: never)
    max_chars: int | None = None  # only texts up to this long (shorter runs)
    seed: int = 7
    idle_timeout_s: float = 60.0  # how long the counters may take to drain after the load

    def __post_init__(self) -> None:
        if self.requests < 2 or self.concurrency < 1 or self.burst_size < 0 or self.bursts < 0:
            raise ValueError("requests >= 2, concurrency >= 1, burst_size >= 0, bursts >= 0")
        if self.bursts % 2:
            raise ValueError("bursts must be even, so both halves of the run carry the same load")


@dataclass
class Outcome:
    phase: str  # "steady" or "burst"
    sla_class: str
    form: str
    chars: int
    kind: str = "failed"  # "ok", "rejected", "abandoned" or "failed"
    status: int | None = None
    detail: str = ""
    pcm_bytes: int = 0
    expected_bytes: int = 0
    retry_after: str | None = None
    reason: str | None = None  # x-gateway-dropped-reason of a rejection
    leak: str | None = None  # what an error body gave away (a worker id, address or message)
    ttfp_s: float | None = None
    sent_s: float | None = None  # since the run started


@dataclass
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class SoakReport:
    plan: SoakPlan
    wall_s: float
    outcomes: list[Outcome] = field(default_factory=list)
    rss_samples: list[tuple[str, int]] = field(default_factory=list)  # (label, bytes)
    idle: dict[str, Any] = field(default_factory=dict)
    gateway_statuses: dict[str, float] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def counts(self) -> dict[str, int]:
        return dict(Counter(o.kind for o in self.outcomes))

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind == "failed"]

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": asdict(self.plan),
            "wall_s": round(self.wall_s, 2),
            "counts": self.counts(),
            "statuses": dict(Counter(str(o.status) for o in self.outcomes)),
            "rejection_reasons": dict(Counter(o.reason for o in self.outcomes if o.kind == "rejected")),
            "audio_s": round(sum(o.pcm_bytes for o in self.outcomes if o.kind == "ok") / BYTES_PER_SECOND, 1),
            "rss_bytes": dict(self.rss_samples),
            "idle": self.idle,
            "gateway_statuses": self.gateway_statuses,
            "checks": [asdict(c) for c in self.checks],
            "failures": [asdict(o) for o in self.failures()[:20]],
        }


def expected_pcm_bytes(text: str, model: StepModel) -> int:
    """The emulator's clip length for ``text`` with the default limits (deterministic)."""
    return model.frames_for(text) * BYTES_PER_SECOND // model.params.frames_per_second


def emulator_model(profile: str = LL_PROFILE) -> StepModel:
    return StepModel(load_deploy_profile(profile))


# ---- one request ------------------------------------------------------------------------
async def _speak(
    session: aiohttp.ClientSession,
    url: str,
    outcome: Outcome,
    text: str,
    abandon: bool,
    headers: dict[str, str],
    run_started: float,
    leaks: LeakCheck = LeakCheck(),
) -> Outcome:
    body: dict[str, Any] = {"model": "tts-1", "voice": "alloy", "input": text}
    body["response_format"] = "wav" if outcome.form == "wav" else "pcm"
    if outcome.form == "sse":
        body["stream_format"] = "sse"
    sent = time.perf_counter()
    outcome.sent_s = sent - run_started
    try:
        async with session.post(
            f"{url}/v1/audio/speech", json=body, headers={SLA_CLASS_HEADER: outcome.sla_class, **headers}
        ) as response:
            outcome.status = response.status
            if response.status != 200:
                body = await response.read()
                _judge_refusal(outcome, response.headers, body)
                _judge_leaks(outcome, body, leaks)
                return outcome
            data = bytearray()
            async for chunk in response.content.iter_any():
                if chunk and outcome.ttfp_s is None:
                    outcome.ttfp_s = time.perf_counter() - sent
                data += chunk
                if abandon and data:
                    outcome.kind, outcome.detail = "abandoned", f"left after {len(data)} bytes"
                    response.close()  # drop the connection mid-stream, as a user closing a tab
                    return outcome
            _judge_audio(outcome, bytes(data))
            if outcome.kind == "failed" and outcome.form == "sse":
                _judge_leaks(outcome, bytes(data[-4096:]), leaks)  # the error event at the end
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        outcome.kind, outcome.detail = "failed", f"transport: {type(exc).__name__}: {exc}"
    return outcome


def _judge_refusal(outcome: Outcome, headers: Any, body: bytes) -> None:
    outcome.retry_after = headers.get("retry-after")
    outcome.reason = headers.get("x-gateway-dropped-reason")
    try:
        error = json.loads(body)["error"]
        envelope = isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}
    except (ValueError, KeyError, TypeError):
        envelope = False
    if outcome.status not in (429, 503):
        outcome.kind, outcome.detail = "failed", f"HTTP {outcome.status}: {body[:200]!r}"
    elif not (outcome.retry_after and outcome.retry_after.isdigit() and int(outcome.retry_after) >= 1):
        outcome.kind, outcome.detail = "failed", f"{outcome.status} without a usable Retry-After ({outcome.retry_after!r})"
    elif not envelope:
        outcome.kind, outcome.detail = "failed", f"{outcome.status} without the OpenAI error envelope: {body[:200]!r}"
    else:
        outcome.kind = "rejected"


def _judge_leaks(outcome: Outcome, body: bytes, leaks: LeakCheck) -> None:
    leak = leaks.find(body)
    if leak is not None:
        outcome.leak = leak
        outcome.kind, outcome.detail = "failed", f"the error body gives away {leak}: {body[:200]!r}"


def _judge_audio(outcome: Outcome, data: bytes) -> None:
    if outcome.form == "sse":
        pcm, last = _sse_pcm(data)
        if last != "speech.audio.done":
            outcome.kind, outcome.detail = "failed", f"SSE ended with {last!r}, not speech.audio.done"
            outcome.pcm_bytes = len(pcm)
            return
    elif outcome.form == "wav":
        if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
            outcome.kind, outcome.detail = "failed", f"not a WAV stream: {data[:12]!r}"
            return
        pcm = data[WAV_HEADER_BYTES:]
    else:
        pcm = data
    outcome.pcm_bytes = len(pcm)
    if len(pcm) != outcome.expected_bytes:
        outcome.kind = "failed"
        outcome.detail = f"audio is {len(pcm)} bytes, the worker makes {outcome.expected_bytes} for this text"
    else:
        outcome.kind = "ok"


def _sse_pcm(data: bytes) -> tuple[bytes, str | None]:
    pcm = bytearray()
    last: str | None = None
    for block in data.split(b"\n\n"):
        for line in block.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            event = json.loads(line[5:])
            last = event.get("type")
            if last == "speech.audio.delta":
                pcm += base64.b64decode(event["audio"])
    return bytes(pcm), last


# ---- the run ------------------------------------------------------------------------------
def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def run_soak(
    gateway_url: str,
    gateway_pid: int,
    worker_urls: Sequence[str],
    plan: SoakPlan,
    admin_token: str,
    headers: dict[str, str] | None = None,
    model: StepModel | None = None,
) -> SoakReport:
    """Drive the load, then judge it. Never raises for a failed check: read ``report.passed``.

    After one unmeasured burst, the run is two equal halves, each ``requests / 2`` steady
    requests with ``bursts / 2`` bursts landing in it, then a pause until everything is idle.
    Memory is compared idle to idle and peak to peak.
    """
    model = model or emulator_model()
    rng = random.Random(plan.seed)
    texts = [t for t in TEXTS if plan.max_chars is None or len(t) <= plan.max_chars]
    if not texts:
        raise ValueError(f"no text is {plan.max_chars} characters or shorter")
    steady_texts = text_order(plan.requests, plan.seed, texts)
    burst_texts = text_order(max(1, plan.burst_size * plan.bursts), plan.seed + 1, texts)
    extra = headers or {}
    outcomes: list[Outcome] = []
    rss: list[tuple[str, int]] = [("start", rss_bytes(gateway_pid))]
    idle: dict[str, Any] = {}

    leaks = await asyncio.to_thread(_leak_check, gateway_url, worker_urls, admin_token)

    def make(phase: str, text: str) -> Outcome:
        expected = expected_pcm_bytes(text, model)
        return Outcome(phase, rng.choice(CLASSES), rng.choice(FORMS), len(text), expected_bytes=expected)

    connector = aiohttp.TCPConnector(limit=0, force_close=False, keepalive_timeout=KEEPALIVE_S)
    timeout = aiohttp.ClientTimeout(total=300)
    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:

        async def burst(number: int) -> list[Outcome]:
            chunk = burst_texts[number * plan.burst_size : (number + 1) * plan.burst_size]
            requests = [_speak(session, gateway_url, make("burst", t), t, False, extra, started, leaks) for t in chunk]
            return list(await asyncio.gather(*requests))

        async def half(number: int, first: int, last: int) -> None:
            count = last - first
            bursts_here = plan.bursts // 2 if plan.burst_size else 0
            # Burst i of this half fires once this many of its steady requests finished.
            marks = [math.floor((i + 0.5) * count / bursts_here) for i in range(bursts_here)]
            burst_tasks: list[asyncio.Task[list[Outcome]]] = []
            state = {"next": first, "done": 0}
            peak = 0
            finished = asyncio.Event()

            async def client() -> None:
                while state["next"] < last:
                    index = state["next"]
                    state["next"] += 1
                    text = steady_texts[index]
                    abandon = plan.abandon_every > 0 and index % plan.abandon_every == plan.abandon_every - 1
                    outcome = make("steady", text)
                    outcomes.append(await _speak(session, gateway_url, outcome, text, abandon, extra, started, leaks))
                    state["done"] += 1
                    while marks and state["done"] >= marks[0]:
                        marks.pop(0)
                        burst_tasks.append(asyncio.create_task(burst(number * bursts_here + len(burst_tasks))))

            async def sample() -> None:
                nonlocal peak
                while not finished.is_set():
                    peak = max(peak, rss_bytes(gateway_pid))
                    try:
                        async with asyncio.timeout(0.2):
                            await finished.wait()
                    except TimeoutError:
                        pass

            sampler = asyncio.create_task(sample())
            await asyncio.gather(*(client() for _ in range(min(plan.concurrency, count))))
            for results in await asyncio.gather(*burst_tasks):
                outcomes.extend(results)
            finished.set()
            await sampler
            rss.append((f"half {number + 1} peak", peak))

        # One unmeasured burst first, so the allocator's high-water marks (glibc arenas, the
        # interpreter's pools) are reached before half 1 and half 2 looks bigger only by
        # really growing. Without it, runs on one busy core read +19-23 MiB growth that the
        # same code at an earlier commit showed too (high-water marks, most likely, not a leak).
        if plan.burst_size:
            warm = burst_texts[: plan.burst_size]
            await asyncio.gather(*(_speak(session, gateway_url, make("warm-up", t), t, False, extra, started, leaks) for t in warm))
            await asyncio.to_thread(_wait_idle, gateway_url, worker_urls, admin_token, plan.idle_timeout_s)
            rss.append(("after warm-up", rss_bytes(gateway_pid)))
        middle = plan.requests // 2
        for number, (first, last) in enumerate(((0, middle), (middle, plan.requests))):
            await half(number, first, last)
            idle = await asyncio.to_thread(_wait_idle, gateway_url, worker_urls, admin_token, plan.idle_timeout_s)
            idle["after_half"] = number + 1
            idle["at_s"] = round(time.perf_counter() - started, 2)
            rss.append((f"half {number + 1} idle", rss_bytes(gateway_pid)))
            if not idle["idle"]:
                break  # a leaked counter: the report says which
    wall = time.perf_counter() - started
    report = SoakReport(plan, wall, outcomes, rss, idle, await asyncio.to_thread(_gateway_statuses, gateway_url))
    report.checks = _checks(report)
    return report


def _leak_check(gateway_url: str, worker_urls: Sequence[str], admin_token: str) -> LeakCheck:
    """What no error body may contain: every worker's id (as the gateway names them) and address."""
    pools = httpx.get(f"{gateway_url}/admin/pools", headers={"Authorization": f"Bearer {admin_token}"}, timeout=10)
    pools.raise_for_status()
    ids = [w["id"] for pool in pools.json()["pools"].values() for w in pool["workers"]]
    return LeakCheck.of(ids, worker_urls)


def _wait_idle(gateway_url: str, worker_urls: Sequence[str], admin_token: str, timeout_s: float) -> dict[str, Any]:
    """Poll until the gateway holds no lease, queues nothing and no worker counts a request."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    deadline = time.monotonic() + timeout_s
    seen: dict[str, Any] = {}
    with httpx.Client(timeout=10) as client:
        while True:
            pools = client.get(f"{gateway_url}/admin/pools", headers=headers).json()
            seen = {
                "gateway_inflight": {name: pool["inflight"] for name, pool in pools["pools"].items()},
                "worker_inflight": {
                    w["id"]: w["inflight"] for pool in pools["pools"].values() for w in pool["workers"]
                },
                "queue_depths": pools["queue_depths"],
                "worker_load": {url: int(client.get(f"{url}/load").json()["server_load"]) for url in worker_urls},
            }
            if not any(v for table in seen.values() for v in table.values()):
                seen["idle"] = True
                return seen
            if time.monotonic() > deadline:
                seen["idle"] = False
                return seen
            time.sleep(0.1)


def _gateway_statuses(gateway_url: str) -> dict[str, float]:
    """``higgs_gateway_requests_total`` summed by status, from the gateway's own metrics."""
    totals: Counter[str] = Counter()
    for line in httpx.get(f"{gateway_url}/metrics", timeout=10).text.splitlines():
        if line.startswith("higgs_gateway_requests_total{"):
            labels, _, value = line.rpartition(" ")
            status = labels.split('status="', 1)[1].split('"', 1)[0]
            totals[status] += float(value)
    return dict(totals)


def _checks(report: SoakReport) -> list[Check]:
    plan, outcomes = report.plan, report.outcomes
    counts = report.counts()
    failures = report.failures()
    leaked = [o for o in outcomes if o.leak is not None]
    sent = plan.requests + plan.burst_size * plan.bursts
    server_errors = {s: n for s, n in report.gateway_statuses.items() if s.startswith("5") and s != "503" and n}
    rss = dict(report.rss_samples)
    idle_1, idle_2 = rss.get("half 1 idle", 0), rss.get("half 2 idle", 0)
    peak_1, peak_2 = rss.get("half 1 peak", 0), rss.get("half 2 peak", 0)
    allowed_growth = max(16 * 1024 * 1024, int(0.10 * idle_1))
    memory_flat = bool(idle_1 and idle_2) and idle_2 - idle_1 <= allowed_growth and peak_2 - peak_1 <= allowed_growth
    ok = counts.get("ok", 0)
    return [
        Check("every request answered", len(outcomes) == sent, f"{len(outcomes)} of {sent}"),
        Check(
            "no failure of any kind",
            not failures,
            "none" if not failures else f"{len(failures)}, e.g. {failures[0].status} {failures[0].detail}",
        ),
        Check(
            "every refusal is 429/503 with Retry-After and the error envelope",
            all(o.status in (429, 503) and o.retry_after for o in outcomes if o.kind == "rejected"),
            f"{counts.get('rejected', 0)} refusals: "
            + ", ".join(f"{r} {n}" for r, n in Counter(o.reason for o in outcomes if o.kind == "rejected").items()),
        ),
        Check("no 5xx other than 503 from the gateway (its own metrics)", not server_errors, str(server_errors or "none")),
        Check(
            "no error body names a worker, a worker's address or what a worker said",
            not leaked,
            "none" if not leaked else f"{len(leaked)}, e.g. {leaked[0].leak}",
        ),
        Check(
            "every accepted request's audio is complete and the right length",
            ok > 0 and all(o.pcm_bytes == o.expected_bytes for o in outcomes if o.kind == "ok"),
            f"{ok} clips, {sum(o.pcm_bytes for o in outcomes if o.kind == 'ok') / BYTES_PER_SECOND:.0f} s of audio",
        ),
        Check("the bursts were past capacity (some refusals)", plan.burst_size == 0 or counts.get("rejected", 0) > 0, ""),
        Check(
            "every in-flight counter back to zero",
            bool(report.idle.get("idle")),
            "gateway leases, admission queues, worker /load all 0" if report.idle.get("idle") else json.dumps(report.idle),
        ),
        Check(
            "gateway memory flat from the first half to the second",
            memory_flat,
            f"RSS idle after each half {idle_1 / 2**20:.1f} -> {idle_2 / 2**20:.1f} MiB, peak "
            f"{peak_1 / 2**20:.1f} -> {peak_2 / 2**20:.1f} MiB (allowed growth {allowed_growth / 2**20:.0f} MiB)",
        ),
    ]


# ---- report ---------------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def markdown(report: SoakReport, command: str, setup: str) -> str:
    data = report.to_json()
    ttfp = [o.ttfp_s for o in report.outcomes if o.kind == "ok" and o.ttfp_s is not None]
    p50, p99 = (percentile(ttfp, 50), percentile(ttfp, 99)) if ttfp else (None, None)
    lines = [
        "# Soak: sustained load, bursts past capacity, clients leaving mid-stream",
        "",
        "Produced by `gateway/bench/soak.py` (what it does and checks is in its docstring;",
        "the bounded test version is `tests/integration/test_soak.py`).",
        "",
        "```sh",
        command,
        "```",
        "",
        setup,
        "",
        f"**Result: {'PASS' if report.passed else 'FAIL'}.** {len(report.outcomes)} requests in {report.wall_s:.0f} s wall; "
        f"{data['audio_s']:.0f} s of audio delivered and checked byte for byte against the emulator's length.",
        "",
        "| check | result | detail |",
        "|---|---|---|",
        *[f"| {c.name} | {'pass' if c.passed else '**FAIL**'} | {c.detail} |" for c in report.checks],
        "",
        "| outcome | requests |",
        "|---|---:|",
        *[f"| {kind} | {n} |" for kind, n in sorted(data["counts"].items())],
        "",
        "| client-seen status | requests |",
        "|---|---:|",
        *[f"| {status} | {n} |" for status, n in sorted(data["statuses"].items())],
        "",
        "| gateway RSS | MiB |",
        "|---|---:|",
        *[f"| {label} | {value / 2**20:.1f} |" for label, value in report.rss_samples],
        "",
        "TTFP of accepted requests (wall clock, with the gateway, the workers and the load generator "
        "sharing the same CPUs; informational only, nothing is asserted on it): "
        f"p50 {_ms(p50)} ms, p99 {_ms(p99)} ms.",
        "",
        "Refusals by reason: "
        + (", ".join(f"`{r}` {n}" for r, n in sorted(data["rejection_reasons"].items(), key=str)) or "none")
        + ".",
        "",
        "Reading it: each burst puts far more requests on the gateway at once than the fleet has",
        "slots and admission queue places, so most burst requests, and steady ones that arrive while",
        "a burst fills the queues, are refused; what is measured is that they are refused cleanly",
        "(429/503 with `Retry-After`) while everything accepted completes in full. `abandoned`",
        "requests were closed by the client after their first audio on purpose; they end as 499 in",
        "the gateway's metrics and must not leave a lease or a worker slot behind.",
        "",
    ]
    return "\n".join(lines)


def _is_error_line(line: str) -> bool:
    try:
        return bool(json.loads(line).get("level") == "ERROR")
    except (ValueError, AttributeError):
        return False


def soak_gateway_document(
    port: int, data_dir: Path, ll: Sequence[str], ht: Sequence[str], token: str, first_byte_timeout_s: float = 30.0
) -> dict[str, Any]:
    """Small admission queues and short waits, so bursts overflow them for real."""
    document: dict[str, Any] = {
        "upstream": {"first_byte_timeout_s": first_byte_timeout_s},
        "server": {"host": "127.0.0.1", "port": port},
        "pools": {
            "low_latency": {"profile": LL_PROFILE, "workers": list(ll)},
            "high_throughput": {"profile": HT_PROFILE, "workers": list(ht)},
        },
        "admission": {
            "queue_size": {"latency": 16, "balanced": 64, "throughput": 64},
            "max_wait_s": {"latency": 0.5, "balanced": 2.0, "throughput": 5.0},
        },
        "auth": {"admin_token": token},
        "logging": {"access_log": False, "level": "WARNING"},
        "data_dir": str(data_dir),
    }
    GatewayConfig(**document)
    return document


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("soak", help="sustained load and bursts past capacity: nothing gives way, one report",
                                 description=__doc__, formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--requests", type=int, default=8000, help="steady requests (the bursts come on top)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--burst-size", type=int, default=256)
    parser.add_argument("--bursts", type=int, default=8)
    parser.add_argument("--abandon-every", type=int, default=40)
    parser.add_argument("--max-chars", type=int, default=None)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--time-scale", type=float, default=0.05, help="the emulated workers' time scale")
    parser.add_argument(
        "--first-byte-timeout", type=float, default=30.0,
        help="the gateway's upstream.first_byte_timeout_s (default: the gateway's own); on a machine shared "
        "with other work, starved emulated workers can take longer than that to their first audio",
    )  # fmt: skip
    parser.add_argument("--ll-workers", type=int, default=1)
    parser.add_argument("--ht-workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the report here (markdown) and a .json beside it")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plan = SoakPlan(
        requests=args.requests, concurrency=args.concurrency, burst_size=args.burst_size, bursts=args.bursts,
        abandon_every=args.abandon_every, max_chars=args.max_chars, seed=args.seed,
    )  # fmt: skip
    command = "higgs-gateway bench " + shlex.join(sys.argv[2:])  # as a user typed it
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="soak-") as work, Fleet(Path(work)) as fleet:
        ll = [fleet.emulator(f"ll{i}", LL_PROFILE, args.time_scale).url for i in range(args.ll_workers)]
        ht = [fleet.emulator(f"ht{i}", HT_PROFILE, args.time_scale, extra=["--warm"]).url for i in range(args.ht_workers)]
        port = free_port()
        config = Path(work) / "gateway.yaml"
        document = soak_gateway_document(port, Path(work) / "data", ll, ht, DEFAULT_TOKEN, args.first_byte_timeout)
        config.write_text(yaml.safe_dump(document))
        gateway_config = GatewayConfig(**document)
        specs = pool_specs(gateway_config, load_pool_profiles(gateway_config))
        slots = f"{specs[PoolName.LOW_LATENCY].slots_per_worker} + {specs[PoolName.HIGH_THROUGHPUT].slots_per_worker}"
        gateway = fleet.gateway("gateway", config, port, ready_path="/ready?require=every_pool")
        report = asyncio.run(run_soak(gateway.url, gateway.pid, [*ll, *ht], plan, DEFAULT_TOKEN))
        errors = [line for line in gateway.log_tail(10**7).splitlines() if _is_error_line(line)]
        report.checks.append(Check("no ERROR line in the gateway's log", not errors, errors[0][:200] if errors else "none"))
    setup = (
        f"Fleet: {args.ll_workers} low-latency and {args.ht_workers} high-throughput emulated worker(s) at time scale "
        f"{args.time_scale} ({slots} slots per pair), gateway with admission queues latency 16 / balanced 64 / "
        f"throughput 64, waits 0.5 / 2 / 5 s, a {args.first_byte_timeout:g} s first-byte timeout and the "
        f"{gateway_config.upstream.transport} upstream client; all processes "
        "on one machine, loopback only. "
        f"Machine: {os.cpu_count()} CPU(s), 1-minute load average {load_before:.1f} before the run and "
        f"{os.getloadavg()[0]:.1f} after it (other work shares the machine)."
    )
    text = markdown(report, command, setup)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return 0 if report.passed else 1
