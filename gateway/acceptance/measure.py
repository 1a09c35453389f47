"""One variant, measured: its worker started through the supervisor, warmed, swept, heard.

The sweep is ``bench``'s own (closed loop per level, the same seeded texts for every
variant, times converted to modelled units under ``--emulate``) over the calibration's
short seed-tts-style sentences, the workload of the published figures it is checked against, direct to the worker so
the numbers are the worker's and not the gateway's. After it, one quality round per level:
as many requests at once as the level, each clip scored as the gateway's sampler scores
them (``gateway.quality.score``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway.acceptance.variants import Variant
from gateway.bench.client import ClientOptions
from gateway.bench.scenarios import RunOptions, sweep
from gateway.bench.workload import TEXTS
from gateway.config import LaunchConfig, WarmupConfig
from gateway.emulator.calibrate import CALIBRATION_TEXTS
from gateway.pools.warmup import warm_up
from gateway.quality.score import Floors, Verdict, score_pcm
from gateway.supervisor.pool import PoolSupervisor
from gateway.types import SPEECH_PATH, PoolName

ACCEPTANCE_ROUNDS = 4  # requests per level: max(ACCEPTANCE_MINIMUM, rounds x level)
ACCEPTANCE_MINIMUM = 32
QUALITY_TEXTS = TEXTS[10:17]  # the medium texts: ten to twenty seconds of audio each


@dataclass
class QualityRound:
    concurrency: int
    verdicts: dict[str, int] = field(default_factory=dict)
    hnr_db: list[float] = field(default_factory=list)
    failed_requests: int = 0

    @property
    def clean(self) -> bool:
        return self.failed_requests == 0 and set(self.verdicts) <= {Verdict.OK.value}

    def as_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "verdicts": self.verdicts,
            "hnr_db_median": round(statistics.median(self.hnr_db), 2) if self.hnr_db else None,
            "hnr_db_min": round(min(self.hnr_db), 2) if self.hnr_db else None,
            "failed_requests": self.failed_requests,
            "clean": self.clean,
        }


@dataclass
class VariantResult:
    variant: Variant
    sweep: dict[str, Any]
    quality: list[QualityRound]
    startup_s: float


class _Sink:
    """The supervisor's worker sink: acceptance only needs to hear that one exists."""

    def __init__(self) -> None:
        self.failed: str | None = None

    def add_worker(self, pool: PoolName, worker_id: str, url: str, managed: bool = False) -> None:
        pass

    def remove_worker(self, worker_id: str) -> None:
        pass

    def worker_restarting(self, worker_id: str) -> None:
        pass

    def worker_failed(self, worker_id: str, reason: str) -> None:
        self.failed = reason


async def _until_healthy(url: str, sink: _Sink, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            if sink.failed is not None:
                raise RuntimeError(f"the worker failed to start: {sink.failed}")
            try:
                if (await client.get(f"{url}/health", timeout=2.0)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.25)
    raise RuntimeError(f"the worker at {url} did not answer /health within {timeout_s:g} s")


async def quality_round(url: str, model: str, concurrency: int, floors: Floors, timeout_s: float) -> QualityRound:
    """``concurrency`` requests at once, each clip scored (in a thread: numpy)."""
    result = QualityRound(concurrency)

    async def one(client: httpx.AsyncClient, text: str) -> None:
        body = {"model": model, "input": text, "voice": "default", "response_format": "pcm", "stream_format": "audio"}
        try:
            response = await client.post(url + SPEECH_PATH, json=body, timeout=timeout_s)
        except httpx.HTTPError:
            result.failed_requests += 1
            return
        if response.status_code != 200:
            result.failed_requests += 1
            return
        score = await asyncio.to_thread(score_pcm, response.content)
        verdict = score.verdict(floors).value
        result.verdicts[verdict] = result.verdicts.get(verdict, 0) + 1
        if score.hnr_db is not None:
            result.hnr_db.append(score.hnr_db)

    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency)) as client:
        await asyncio.gather(*(one(client, QUALITY_TEXTS[i % len(QUALITY_TEXTS)]) for i in range(concurrency)))
    return result


async def _warm_every_batch_size(url: str, model: str, top: int) -> None:
    """The gateway's own warm-up (``pools.warmup``), with a burst at every size from 1 to ``top``.

    A high-throughput worker captures its local MLP graph once per exact decode batch size,
    each capture stalling the whole batch (450 ms on an H200). Warmed by one round of mixed
    lengths (which left 23 of 64 sizes uncaptured), the sweep paid a dozen captures at c16-c32
    and read high-throughput ~11% slower there than a warm worker, hiding the crossover the
    profiles' notes describe. The gateway's default sizes (powers of two, each burst's budgets
    staggered) still left a few sizes cold on a loaded machine at time scale 0.25; a burst at
    every size leaves none, and a measurement must start from a fully warm worker.
    """
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        report = await warm_up(client, url, model, WarmupConfig(), range(1, top + 1))
    if not report.ok:
        raise RuntimeError(report.summary())


async def measure_variant(
    variant: Variant,
    launch: LaunchConfig,
    data_dir: Path,
    *,
    levels: list[int],
    requests: int | None,
    time_scale: float,
    floors: Floors,
    served_model: str,
    progress: bool,
) -> VariantResult:
    sink = _Sink()
    supervisor = PoolSupervisor(variant.pool, launch, variant.profile_path, sink, data_dir / variant.name, served_model)
    started = time.monotonic()
    await supervisor.start()
    try:
        url = supervisor.workers[0].url
        await _until_healthy(url, sink, launch.start_timeout_s)
        startup_s = (time.monotonic() - started) / time_scale
        # The published sweeps' short sentences: on long clips low-latency's prefills are rarer and
        # it stays ahead of high-throughput past c16, so the crossover check would read another workload.
        options = RunOptions(
            ClientOptions(url=url, model=served_model), variant.name, "aiohttp", time_scale, 0, progress, texts=CALIBRATION_TEXTS
        )
        own = [level for level in levels if level <= variant.max_concurrency()]
        await _warm_every_batch_size(url, served_model, max(own))
        # Four rounds per client, as the comparison's sweep: with two, half a level's requests
        # run while it drains (fewer than c in flight).
        document = await sweep(options, own, requests, rounds=ACCEPTANCE_ROUNDS, minimum=ACCEPTANCE_MINIMUM)
        document["params"]["variant"] = variant.name
        rounds = [await quality_round(url, served_model, level, floors, 600.0) for level in own]
        return VariantResult(variant, document, rounds, startup_s)
    finally:
        await supervisor.stop()
