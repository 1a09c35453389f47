"""Drive load and return result documents: the two benchmark shapes as complete runs.

``sweep``: closed-loop concurrency levels, ``concurrency`` callers each sending their next
request as soon as the last one finished, until ``requests`` were sent (how vllm-omni's
benchmark sweeps). ``trace``: one open-loop arrival trace, each request leaving at its
offset whether or not earlier ones finished, which is how real traffic behaves and the only
way to see queueing under bursts. Both take their parameters in modelled units and compress
time by ``time_scale`` themselves, so the same command describes the same workload whatever
the emulator's speed.

Progress is one line on stderr, hand-rolled to keep the client lean: on a terminal it is
redrawn in place (at most a few times a second, so drawing never costs the load generator
measurable time); elsewhere (CI logs, pipes) only the final line of each phase is printed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

from gateway.bench.client import ClientKind, ClientOptions, RequestResult, RequestSpec, SpeechClient, make_client
from gateway.bench.report import SCHEMA
from gateway.bench.stats import percentile
from gateway.bench.summary import PhaseResult, summarize_phase, timeline
from gateway.bench.workload import TEXTS, Arrival, text_order
from gateway.types import SlaClass

DEFAULT_LEVELS = (1, 2, 4, 8, 16, 32, 64)
TIMELINE_WINDOW_S = 10.0  # modelled seconds per row of a trace's timeline
T = TypeVar("T")
_REDRAW_S = 0.2


@dataclass(frozen=True, slots=True)
class RunOptions:
    client: ClientOptions
    label: str
    client_kind: ClientKind = "aiohttp"
    time_scale: float = 1.0
    seed: int = 0
    progress: bool = True
    texts: Sequence[str] = TEXTS
    notes: dict[str, Any] = field(default_factory=dict)  # extra context recorded in the document
    # The fleet simulator's client and virtual clock; None = HTTP to ``client.url``, wall time.
    make_client: Callable[[], SpeechClient] | None = None
    clock: Callable[[], float] = time.perf_counter

    def open_client(self) -> SpeechClient:
        if self.make_client is not None:
            return self.make_client()
        return make_client(self.client_kind, self.client)


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when present: the load generator's own overhead matters at c64."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def requests_for(concurrency: int, requests: int | None, rounds: int = 2, minimum: int = 16) -> int:
    """Requests measured at one level: as given, else ``rounds`` rounds (at least ``minimum``).

    More rounds mean more of the level runs at full concurrency: a closed loop's last
    round drains with fewer requests in flight than the level says.
    """
    return requests if requests else max(minimum, rounds * concurrency)


def _document(options: RunOptions, mode: str, params: dict[str, Any], phases: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "label": options.label,
        "mode": mode,
        "url": options.client.url,
        "time_scale": options.time_scale,
        "client": options.client_kind,
        "seed": options.seed,
        "machine": f"{os.cpu_count()}-core {platform.machine()}",
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "params": params,
        "notes": dict(options.notes),
        "phases": phases,
    }


def _progress(options: RunOptions, name: str, total: int) -> Progress:
    return Progress(f"{options.label} {name}", total, enabled=options.progress)


async def _warm(client: SpeechClient, options: RunOptions, concurrency: int, count: int) -> None:
    """Unmeasured requests of the shortest texts, so connections and lazy graphs exist."""
    if count <= 0:
        return
    shortest = sorted(options.texts, key=len)[: max(1, len(options.texts) // 4)]
    specs = [RequestSpec(shortest[i % len(shortest)]) for i in range(count)]
    await run_closed(client, specs, concurrency, "warmup", clock=options.clock)


async def warm_up(options: RunOptions, concurrency: int) -> None:
    """One unmeasured round of mixed-length texts at ``concurrency``.

    Clips of different lengths finish at different times, so a worker's batch passes
    through most sizes from ``concurrency`` down to 1: a high-throughput worker captures
    its lazy per-size graphs here instead of during the measurement.
    """
    client = options.open_client()
    try:
        specs = [RequestSpec(text) for text in text_order(concurrency, options.seed + 1, options.texts)]
        await run_closed(client, specs, concurrency, "warmup", clock=options.clock)
    finally:
        await client.close()


async def sweep(
    options: RunOptions,
    levels: Sequence[int] = DEFAULT_LEVELS,
    requests: int | None = None,
    warmup: int = 0,
    sla_class: SlaClass | None = None,
    rounds: int = 2,
    minimum: int = 16,
    collect: list[PhaseResult] | None = None,
) -> dict[str, Any]:
    """Closed-loop levels; every level gets the same seeded text sequence. ``collect``: also
    append each level's raw requests there (with their chunks), for a caller's own timeline."""
    client = options.open_client()
    phases = []
    try:
        for concurrency in levels:
            count = requests_for(concurrency, requests, rounds, minimum)
            await _warm(client, options, concurrency, warmup)
            specs = [RequestSpec(text, sla_class) for text in text_order(count, options.seed, options.texts)]
            progress = _progress(options, f"c{concurrency}", count)
            phase = await run_closed(client, specs, concurrency, f"c{concurrency}", progress,
                                     keep_chunks=collect is not None, clock=options.clock)  # fmt: skip
            progress.close()
            phases.append(summarize_phase(phase, options.time_scale))
            if collect is not None:
                collect.append(phase)
    finally:
        await client.close()
    params = {"levels": list(levels), "requests": requests or f"max({minimum}, {rounds} x level)",
              "warmup": warmup, "sla_class": sla_class}
    return _document(options, "sweep", params, phases)


def repeated_voice_stats(results: Sequence[RequestResult], time_scale: float) -> dict[str, Any]:
    """TTFP of the requests whose voice was already used earlier in the trace (a worker may
    hold its codes), and of the first ones (no worker can), in modelled seconds."""
    seen: set[str] = set()
    first: list[float] = []
    repeated: list[float] = []
    for result in sorted(results, key=lambda r: r.sent_s):
        if result.voice is None:
            continue
        if result.ok and result.ttfp_s is not None:
            (repeated if result.voice in seen else first).append(result.ttfp_s / time_scale)
        seen.add(result.voice)
    return {
        "repeated": {
            "count": len(repeated), "ttfp_mean_s": sum(repeated) / len(repeated) if repeated else None,
            "ttfp_p10_s": _quantile(repeated, 10), "ttfp_p50_s": _quantile(repeated, 50), "ttfp_p90_s": _quantile(repeated, 90),
        },  # fmt: skip
        "first": {"count": len(first), "ttfp_p50_s": _quantile(first, 50)},
    }


def _quantile(values: Sequence[float], q: float) -> float | None:
    return percentile(values, q) if values else None


async def trace(
    options: RunOptions,
    arrivals: Sequence[Arrival],
    name: str,
    params: dict[str, Any],
    warmup: int = 0,
    voice_names: Sequence[str] = (),
) -> dict[str, Any]:
    """One open-loop trace; ``arrivals`` are in modelled seconds. An arrival's ``voice``
    indexes ``voice_names`` (a voice clone trace)."""
    client = options.open_client()
    try:
        await _warm(client, options, max(1, warmup), warmup)
        texts = text_order(len(arrivals), options.seed, options.texts)
        specs = [
            RequestSpec(text, arrival.sla_class, None if arrival.voice is None else voice_names[arrival.voice])
            for text, arrival in zip(texts, arrivals, strict=True)
        ]
        scaled = [Arrival(arrival.at_s * options.time_scale, arrival.sla_class) for arrival in arrivals]
        progress = _progress(options, name, len(specs))
        phase = await run_open(client, specs, scaled, name, progress, clock=options.clock)
        progress.close()
    finally:
        await client.close()
    summary = summarize_phase(phase, options.time_scale)
    summary["timeline"] = timeline(phase.results, TIMELINE_WINDOW_S, options.time_scale)
    if voice_names:
        summary["repeated_voices"] = repeated_voice_stats(phase.results, options.time_scale)
    return _document(options, "trace", {**params, "warmup": warmup}, [summary])


# ---- progress on stderr ---------------------------------------------------------------------
class Progress:
    def __init__(self, label: str, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self._label = label
        self._total = total
        self._stream = stream or sys.stderr
        self._enabled = enabled
        self._live = enabled and self._stream.isatty()
        self._start = time.monotonic()
        self._last_draw = 0.0
        self.done = 0
        self.errors = 0

    def update(self, ok: bool) -> None:
        self.done += 1
        self.errors += 0 if ok else 1
        now = time.monotonic()
        if self._live and (now - self._last_draw >= _REDRAW_S or self.done == self._total):
            self._last_draw = now
            self._stream.write("\r" + self._line(now))
            self._stream.flush()

    def close(self) -> None:
        if not self._enabled:
            return
        line = self._line(time.monotonic())
        self._stream.write(("\r" + line + "\n") if self._live else line + "\n")
        self._stream.flush()

    def _line(self, now: float) -> str:
        width = 24
        filled = int(width * self.done / self._total) if self._total else width
        bar = "#" * filled + "." * (width - filled)
        return (
            f"{self._label:<18} [{bar}] {self.done}/{self._total}"
            f"  errors {self.errors}  {now - self._start:6.1f}s"
        )


# ---- driving load: closed loop, open loop ---------------------------------------------------
ProgressFactory = Callable[[str, int], Progress]
# Wall time by default; the fleet simulator passes its virtual clock.
Clock = Callable[[], float]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _trim(results: list[RequestResult], keep_chunks: bool) -> list[RequestResult]:
    if not keep_chunks:
        for result in results:
            result.chunks = []
    return results


async def run_closed(
    client: SpeechClient,
    specs: Sequence[RequestSpec],
    concurrency: int,
    name: str,
    progress: Progress | None = None,
    keep_chunks: bool = False,
    clock: Clock = time.perf_counter,
) -> PhaseResult:
    """Send ``specs`` with at most ``concurrency`` in flight, each caller back-to-back."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    results: list[RequestResult | None] = [None] * len(specs)
    next_index = 0
    start = clock()
    cpu_start = _cpu_seconds()

    async def caller() -> None:
        nonlocal next_index
        while next_index < len(specs):
            index = next_index
            next_index += 1  # single-threaded loop: no lock needed between awaits
            result = await client.speak(specs[index], start)
            results[index] = result
            if progress:
                progress.update(result.ok)

    await asyncio.gather(*(caller() for _ in range(min(concurrency, len(specs)))))
    wall = clock() - start
    done = [result for result in results if result is not None]
    return PhaseResult(name, "closed", concurrency, wall, _cpu_seconds() - cpu_start, _trim(done, keep_chunks),
                       loadavg_1m=os.getloadavg()[0], started_at=start)  # fmt: skip


async def run_open(
    client: SpeechClient,
    specs: Sequence[RequestSpec],
    arrivals: Sequence[Arrival],
    name: str,
    progress: Progress | None = None,
    keep_chunks: bool = False,
    clock: Clock = time.perf_counter,
) -> PhaseResult:
    """Send ``specs[i]`` at ``arrivals[i].at_s`` after the start, never waiting on replies."""
    if len(specs) != len(arrivals):
        raise ValueError("one spec per arrival")
    start = clock()
    cpu_start = _cpu_seconds()

    async def one(spec: RequestSpec, arrival: Arrival) -> RequestResult:
        delay = start + arrival.at_s - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        result = await client.speak(spec, start)
        if progress:
            progress.update(result.ok)
        return result

    results = await asyncio.gather(*(one(spec, arrival) for spec, arrival in zip(specs, arrivals, strict=True)))
    wall = clock() - start
    span = arrivals[-1].at_s if arrivals else 0.0
    rate = len(arrivals) / span if span > 0 else None
    return PhaseResult(name, "open", None, wall, _cpu_seconds() - cpu_start, _trim(list(results), keep_chunks), rate,
                       loadavg_1m=os.getloadavg()[0], started_at=start)  # fmt: skip


async def run_closed_until(
    client: SpeechClient,
    specs: Sequence[RequestSpec],
    concurrency: int,
    name: str,
    stop: asyncio.Event,
    keep_chunks: bool = False,
    clock: Clock = time.perf_counter,
) -> PhaseResult:
    """Sustained closed loop: ``concurrency`` callers cycle through ``specs`` until ``stop``
    is set; each caller finishes the request it has in flight (none is cut)."""
    if concurrency < 1 or not specs:
        raise ValueError("concurrency must be >= 1 and specs not empty")
    results: list[RequestResult] = []
    sent = 0
    start = clock()
    cpu_start = _cpu_seconds()

    async def caller() -> None:
        nonlocal sent
        while not stop.is_set():
            spec = specs[sent % len(specs)]
            sent += 1  # single-threaded loop: no lock needed between awaits
            results.append(await client.speak(spec, start))

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    wall = clock() - start
    results.sort(key=lambda result: result.sent_s)
    return PhaseResult(name, "closed", concurrency, wall, _cpu_seconds() - cpu_start, _trim(results, keep_chunks),
                       loadavg_1m=os.getloadavg()[0], started_at=start)  # fmt: skip
