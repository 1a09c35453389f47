"""Drive load: closed-loop concurrency levels and open-loop arrival traces.

Closed loop: ``concurrency`` callers each send their next request as soon as the last
one finished, until ``requests`` were sent (how vllm-omni's benchmark sweeps). Open
loop: each request leaves at its trace offset whether or not earlier ones finished, which
is how real traffic behaves and the only way to see queueing under bursts.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway.bench.client import RequestResult, RequestSpec, SpeechClient
from gateway.bench.progress import Progress
from gateway.bench.traces import Arrival


@dataclass(slots=True)
class PhaseResult:
    """Every request of one level (or one trace) and the wall time it took."""

    name: str
    mode: str  # "closed" or "open"
    concurrency: int | None  # closed loop only
    wall_s: float
    client_cpu_s: float  # the load generator's own CPU time: proof it was not the bottleneck
    results: list[RequestResult] = field(default_factory=list)
    offered_rate: float | None = None  # open loop: requests per second the trace offered
    loadavg_1m: float | None = None  # the machine's load at the end: was anything else running?
    started_at: float = 0.0  # the clock at the phase start (``sent_s`` counts from it)


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
