"""Warm a fresh worker before it takes user traffic.

A high-throughput worker captures its local MLP CUDA graph lazily, once per exact decode
batch size: the first user request at each new batch size pays for a 36-layer capture.
Sending a burst of every size first moves that cost before the worker is routable. The
bursts go straight to the worker's URL, so they never show up in the gateway's metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from gateway.config import WarmupConfig
from gateway.types import PoolName

HIGH_THROUGHPUT_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
# Each request of a burst asks for this many more tokens than the one before (a decode step
# or two at every batch size on the way down, margin for requests admitted a step late).
STAGGER_TOKENS = 3


def default_batch_sizes(pool: PoolName, max_num_seqs: int) -> list[int]:
    """Low-latency captures its graphs at start-up: one request suffices. High-throughput:
    every power of two the worker can run at once (sizes past max_num_seqs would only queue)."""
    if pool is PoolName.LOW_LATENCY:
        return [1]
    return [size for size in HIGH_THROUGHPUT_SIZES if size <= max_num_seqs] or [1]


def batch_sizes_for(pool: PoolName, warmup: WarmupConfig, max_num_seqs: int) -> list[int]:
    """The configured sizes, else the pool's default."""
    return list(warmup.batch_sizes) if warmup.batch_sizes else default_batch_sizes(pool, max_num_seqs)


@dataclass(frozen=True)
class BurstResult:
    batch_size: int
    succeeded: int
    failed: int
    audio_bytes: int
    seconds: float
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.succeeded == self.batch_size


@dataclass(frozen=True)
class WarmupReport:
    base_url: str
    bursts: tuple[BurstResult, ...]
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(burst.ok for burst in self.bursts)

    @property
    def batch_sizes(self) -> list[int]:
        return [burst.batch_size for burst in self.bursts]

    def summary(self) -> str:
        parts = [
            f"{b.batch_size}:{'ok' if b.ok else f'{b.failed} failed'}" for b in self.bursts
        ]
        state = "ok" if self.ok else ("timed out" if self.timed_out else "failed")
        errors = sorted({error for burst in self.bursts for error in burst.errors})
        detail = f" ({'; '.join(errors[:3])})" if errors else ""
        return f"warm-up of {self.base_url} {state} in {self.seconds:.1f}s [{' '.join(parts)}]{detail}"


async def warm_up(
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    warmup: WarmupConfig,
    batch_sizes: Sequence[int],
) -> WarmupReport:
    """For each size, that many concurrent short streaming requests, each read to the end.

    Never raises for the worker's sake: failures are in the report and the caller decides
    (the fleet keeps a worker unready while its warm-up fails). ``warmup.timeout_s`` bounds
    the whole warm-up.
    """
    base_url = base_url.rstrip("/")
    payload = {
        "model": model,
        "input": warmup.text,
        "response_format": "pcm",
        "stream_format": "audio",
        "max_new_tokens": warmup.max_new_tokens,
    }
    started = time.perf_counter()
    bursts: list[BurstResult] = []
    timed_out = False
    try:
        async with asyncio.timeout(warmup.timeout_s):
            for size in batch_sizes:
                bursts.append(await _burst(client, f"{base_url}/v1/audio/speech", payload, size))
    except TimeoutError:
        timed_out = True
    return WarmupReport(base_url, tuple(bursts), time.perf_counter() - started, timed_out)


def _staggered(payload: dict[str, object], index: int) -> dict[str, object]:
    """The burst's ``index``-th request, STAGGER_TOKENS longer than the one before."""
    budget = payload["max_new_tokens"]
    assert isinstance(budget, int)
    return {**payload, "max_new_tokens": budget + STAGGER_TOKENS * index}


async def _burst(client: httpx.AsyncClient, url: str, payload: dict[str, object], size: int) -> BurstResult:
    started = time.perf_counter()
    # All at once so the worker decodes them as one batch of this size; budgets one stagger
    # apart so they end one by one and the batch then steps through every smaller size too.
    # Identical budgets end together: a burst of 64 captured size 64 and nothing between
    # it and 32, and traffic at c33-c63 paid those captures (450 ms stalls of every stream).
    results = await asyncio.gather(*(_one(client, url, _staggered(payload, i)) for i in range(size)))
    errors = tuple(error for _, error in results if error is not None)
    return BurstResult(
        batch_size=size,
        succeeded=size - len(errors),
        failed=len(errors),
        audio_bytes=sum(count for count, _ in results),
        seconds=time.perf_counter() - started,
        errors=errors,
    )


async def _one(client: httpx.AsyncClient, url: str, payload: dict[str, object]) -> tuple[int, str | None]:
    """(audio bytes, error or None); the body is read fully, as a real client would."""
    received = 0
    try:
        async with client.stream("POST", url, json=payload) as response:
            if response.status_code != 200:
                body = (await response.aread())[:200].decode(errors="replace")
                return 0, f"HTTP {response.status_code}: {body}"
            async for chunk in response.aiter_bytes():
                received += len(chunk)
    except httpx.HTTPError as exc:
        return received, f"{type(exc).__name__}: {exc}"
    if received == 0:
        return 0, "no audio"
    return received, None
