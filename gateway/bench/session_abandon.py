"""Sessions opened and abandoned every way a client abandons one, then what the gateway kept.

Each session is left one of the ``WAYS``: dropped without a close frame or closed while a
sentence streams, left idle (half a sentence buffered) until the idle timeout, sent a bad
message (a binary frame, invalid JSON, an unknown type), a storm of ``input.cancel``, or
never configured. A warm-up wave first brings the gateway's allocations to their working
level; then, once the gateway has settled after the measured round, nothing may be left:
every worker's ``/load`` at 0, no session open, no lease in flight or queued, no more
asyncio tasks than before, and the resident memory back within ``RSS_TOLERANCE_*``.

The gateway's side is read from its ``/metrics`` (``higgs_gateway_sessions_open``,
``_pool_inflight``, ``_admission_queue_depth``, ``_key_streams``, ``_event_loop_tasks`` and
the process collector's ``process_resident_memory_bytes`` / ``process_open_fds``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from gateway.bench.report import whole
from gateway.bench.targets import ADAPTIVE, Target
from gateway.bench.voice_client import REPLIES, SessionOptions, open_session, stream_url

WAYS = ("drop", "close", "idle", "binary_frame", "invalid_json", "unknown_type", "cancel_storm", "no_config")
DEFAULT_SESSIONS = 200
DEFAULT_CONCURRENCY = 16
# The gateway's idle and config timeouts for a run with abandonment (wall seconds): short, so
# the idle sessions end in seconds rather than the default 30 s.
TIMEOUT_S = 3.0
CANCEL_STORM = 20
# Freed memory is not all given back to the system (allocator arenas, fragmentation): after a
# warm-up wave at the same concurrency, RSS may sit a little above where it was. A leak of
# even 20 KB per session is 4 MiB over 200 sessions, so that (or 5% of a large process)
# is the bound.
RSS_TOLERANCE_SHARE = 0.05
RSS_TOLERANCE_BYTES = 4 * 1024 * 1024
SETTLE_S = 30.0
# Mid-sentence: a whole sentence is sent to a worker while the next one is still being typed.
MID_SENTENCE = REPLIES[0].sentences[1] + " " + REPLIES[0].sentences[2] + " And then the"
HALF_SENTENCE = "And then the"


def gateway_timeouts(pause_wall_s: float) -> dict[str, float]:
    """``sessions`` config for a gateway that will see abandoned sessions: short timers, but
    well above the pause between a benchmark session's replies (the idle timer runs there)."""
    timeout = max(TIMEOUT_S, 4 * pause_wall_s)
    return {"idle_timeout_s": timeout, "config_timeout_s": timeout}


# --- the ways ------------------------------------------------------------------------------


async def _until_audio(ws: ClientConnection) -> bool:
    """Read until a sentence's audio flows (True) or its request ended without audio (False)."""
    async for frame in ws:
        if isinstance(frame, bytes) and frame:
            return True
        if isinstance(frame, str) and json.loads(frame).get("type") in ("audio.done", "error"):
            return False
    return False


async def _until_closed(ws: ClientConnection) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for _ in ws:
            pass


def _drop(ws: ClientConnection) -> None:
    """Gone without a close frame, as a crashed client or a lost network."""
    ws.transport.abort()


async def _mid_sentence(options: SessionOptions, way: str) -> bool:
    ws = await open_session(options, gateway=True)
    try:
        await ws.send(json.dumps({"type": "input.text", "text": MID_SENTENCE}))
        streaming = await _until_audio(ws)
        if way == "drop":
            _drop(ws)
        elif way == "binary_frame":  # the session ends with an error, as on the worker
            await ws.send(b"\x00\x01")
            await _until_closed(ws)
        elif way == "invalid_json":  # answered with an error; the session goes on until the drop
            await ws.send("{not json")
            _drop(ws)
        elif way == "unknown_type":
            await ws.send(json.dumps({"type": "input.nonsense"}))
        elif way == "cancel_storm":
            for _ in range(CANCEL_STORM):
                await ws.send(json.dumps({"type": "input.text", "text": "One more sentence. "}))
                await ws.send(json.dumps({"type": "input.cancel"}))
        return streaming
    finally:
        await ws.close()  # after a drop: a no-op on the dead transport


async def _idle(options: SessionOptions) -> bool:
    ws = await open_session(options, gateway=True)
    try:
        await ws.send(json.dumps({"type": "input.text", "text": HALF_SENTENCE}))
        await _until_closed(ws)  # the gateway's idle timeout ends it
        return False
    finally:
        await ws.close()


async def _no_config(options: SessionOptions) -> bool:
    ws = await connect(stream_url(options.url), open_timeout=options.timeout_s)
    try:
        await _until_closed(ws)  # the gateway's config timeout ends it
        return False
    finally:
        await ws.close()


async def abandon_one(options: SessionOptions, way: str) -> bool:
    """Open a session and abandon it ``way``; True when audio was flowing at that moment."""
    if way == "idle":
        return await _idle(options)
    if way == "no_config":
        return await _no_config(options)
    return await _mid_sentence(options, way)


# --- what the gateway and the workers hold ----------------------------------------------------


def _sum(text: str, name: str) -> float | None:
    found = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
    return sum(found) if found else None


async def sample(client: httpx.AsyncClient, gateway: str, workers: Sequence[str]) -> dict[str, Any]:
    """One reading of everything a session could leave behind."""
    text = (await client.get(f"{gateway}/metrics")).text
    loads = await asyncio.gather(*(client.get(f"{url}/load") for url in workers))
    tasks = _sum(text, "higgs_gateway_event_loop_tasks")
    return {
        "sessions_open": _sum(text, "higgs_gateway_sessions_open") or 0,
        "inflight": _sum(text, "higgs_gateway_pool_inflight") or 0,
        "queued": _sum(text, "higgs_gateway_admission_queue_depth") or 0,
        "key_streams": _sum(text, "higgs_gateway_key_streams") or 0,
        "worker_load": sum(int(r.json()["server_load"]) for r in loads),
        "tasks": None if tasks is None or math.isnan(tasks) else int(tasks),  # NaN: not read on the loop
        "rss_bytes": _sum(text, "process_resident_memory_bytes"),
        "open_fds": _sum(text, "process_open_fds"),
    }


def _held(now: dict[str, Any], before: dict[str, Any]) -> int:
    """What ``now`` holds that an idle gateway must not: sessions, leases, worker slots, extra tasks."""
    extra_tasks = 0 if now["tasks"] is None or before["tasks"] is None else max(0, now["tasks"] - before["tasks"])
    held = now["sessions_open"] + now["inflight"] + now["queued"] + now["key_streams"] + now["worker_load"]
    return int(held) + extra_tasks


async def settle(client: httpx.AsyncClient, gateway: str, workers: Sequence[str], before: dict[str, Any],
                 timeout_s: float) -> tuple[dict[str, Any], float | None]:  # fmt: skip
    """Poll until nothing is held; returns the last reading and how long it took (None: never)."""
    started = time.perf_counter()
    while True:
        now = await sample(client, gateway, workers)
        if _held(now, before) == 0:
            return now, time.perf_counter() - started
        if time.perf_counter() - started > timeout_s:
            return now, None
        await asyncio.sleep(0.1)


async def _round(
    options: SessionOptions, count: int, concurrency: int, first: int = 0
) -> tuple[Counter[str], int, list[str]]:
    """``count`` sessions, at most ``concurrency`` at once, the ways in turn; returns the
    failures by way, how many were abandoned with audio flowing, and the first errors."""
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> bool:
        async with gate:
            way = WAYS[index % len(WAYS)]
            async with asyncio.timeout(options.timeout_s):
                return await abandon_one(options, way)

    results = await asyncio.gather(*(one(first + i) for i in range(count)), return_exceptions=True)
    failed: Counter[str] = Counter()
    errors: list[str] = []
    for index, result in enumerate(results):
        if isinstance(result, BaseException):
            failed[WAYS[(first + index) % len(WAYS)]] += 1
            errors.append(f"{type(result).__name__}: {result}"[:200])
    return failed, sum(r is True for r in results), errors[:5]


async def measure(options: SessionOptions, workers: Sequence[str], sessions: int, concurrency: int,
                  timeouts: dict[str, float]) -> dict[str, Any]:  # fmt: skip
    """The abandonment phase's document (wall seconds)."""
    settle_timeout = SETTLE_S + max(timeouts.values())
    warmup = max(len(WAYS), concurrency)
    async with httpx.AsyncClient(timeout=10.0) as client:
        await _round(options, warmup, concurrency)  # allocations reach their working level, unmeasured
        idle = {"tasks": None}
        before, _ = await settle(client, options.url, workers, idle, settle_timeout)
        started = time.perf_counter()
        failed, streaming, errors = await _round(options, sessions, concurrency, first=warmup)
        wall = time.perf_counter() - started
        after, settle_s = await settle(client, options.url, workers, before, settle_timeout)
    return {
        "sessions": sessions, "concurrency": concurrency, "warmup": warmup,
        "ways": {way: sum(1 for i in range(sessions) if WAYS[(warmup + i) % len(WAYS)] == way) for way in WAYS},
        "failed": dict(failed), "errors": errors, "abandoned_streaming": streaming,
        "gateway_timeouts_s": timeouts, "wall_s": wall, "settle_s": settle_s,
        "before": before, "after": after, "held_after": _held(after, before),
    }  # fmt: skip


# --- judging ------------------------------------------------------------------------------------


def rss_bound(before_bytes: float) -> float:
    return before_bytes + max(before_bytes * RSS_TOLERANCE_SHARE, RSS_TOLERANCE_BYTES)


MIB = 1024 * 1024


def targets(result: dict[str, Any] | None, error: str | None = None) -> list[Target]:
    """The two rows: nothing held once settled (and every session abandoned as planned), and
    the gateway's RSS back within the tolerance. An abandonment that did not run is missed."""
    if result is None:
        if error is None:
            return []
        never = float("nan")
        return [Target("sessions abandoned every way: sessions, slots, streams, tasks left", never, 0, "=", 0, False),
                Target("sessions abandoned every way: gateway RSS (MiB)", never, never, "<= before + tolerance", never,
                       False)]  # fmt: skip
    name = f"{result['sessions']} sessions abandoned every way"
    held = result["held_after"]
    failed = sum(result["failed"].values())
    rows = [Target(f"{name}: sessions, slots, streams, tasks left", held, 0, "=", 0,
                   held == 0 and failed == 0 and result["settle_s"] is not None)]  # fmt: skip
    before, after = result["before"]["rss_bytes"], result["after"]["rss_bytes"]
    if before is not None and after is not None:
        bound = rss_bound(before)
        rows.append(Target(f"{name}: gateway RSS (MiB)", after / MIB, before / MIB, "<= before + max(5%, 4 MiB)",
                           bound / MIB, after <= bound))  # fmt: skip
    return rows


def evaluate(documents: Sequence[dict[str, Any]]) -> list[Target]:
    """The adaptive setup's rows (empty when its run measured no abandonment)."""
    document = next((d for d in documents if d["label"] == ADAPTIVE and d["mode"] == "sessions"), None)
    if document is None:
        return []
    return targets(document.get("abandon"), document.get("abandon_error"))


def report_lines(documents: Sequence[dict[str, Any]]) -> list[str]:
    """A table per gateway setup: what was held before and after (empty without a phase)."""
    measured = [d for d in documents if d.get("abandon")]
    if not measured:
        return []
    first = measured[0]["abandon"]
    lines = [
        "## Abandoned sessions", "",
        (f"{first['sessions']} sessions, at most {first['concurrency']} at once, each abandoned one way in turn "
         f"({', '.join(WAYS)}) after a warm-up wave of {first['warmup']}; the gateway's idle and config timeouts "
         f"were {max(first['gateway_timeouts_s'].values()):g} s for this run. Read once every worker's `/load`, "
         "the gateway's open sessions, leases, queue and asyncio tasks were back (wall seconds)."), "",
        ("| setup | failed | streaming when left | settled in (s) | held after | tasks before / after | "
         "RSS before / after (MiB) | open fds before / after |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for document in measured:
        a = document["abandon"]
        b, c = a["before"], a["after"]
        settled = "never" if a["settle_s"] is None else f"{a['settle_s']:.1f}"
        lines.append(f"| {document['label']} | {sum(a['failed'].values())} | {a['abandoned_streaming']} | {settled} | "
                     f"{a['held_after']} | {b['tasks']} / {c['tasks']} | {_mib(b['rss_bytes'])} / {_mib(c['rss_bytes'])} | "
                     f"{whole(b['open_fds'])} / {whole(c['open_fds'])} |")  # fmt: skip
    return [*lines, ""]


def _mib(value: float | None) -> str:
    return "–" if value is None else f"{value / MIB:.1f}"
