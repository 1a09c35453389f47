"""A probe text for workers whose traffic is too thin to sample.

Every ``probe_interval_s`` each routable worker that had nothing scored since the last round
is sent ``probe_text`` (raw PCM, as the relay asks for it) on the control client, outside
admission, like the health probes; the clip goes to the same scorer as sampled streams. A
probe that fails is counted and left to the health checks: it says nothing about quality.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Set

import httpx

from gateway.pools.background import BackgroundLoop
from gateway.pools.worker import Worker
from gateway.quality.judge import QualityJudge
from gateway.quality.metrics import QualityMetrics
from gateway.quality.sampler import QualitySampler, Sample, drop_absent
from gateway.quality.score import Score, score_pcm
from gateway.types import SPEECH_PATH

log = logging.getLogger("higgs_gateway.quality")


class QualityProbe:
    def __init__(
        self,
        workers: Callable[[], Iterable[Worker]],
        client: httpx.AsyncClient,
        sampler: QualitySampler,
        judge: QualityJudge,
        metrics: QualityMetrics,
        *,
        interval_s: float,
        text: str,
        served_model: str,
        timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._workers = workers
        self._client = client
        self._sampler = sampler
        self._judge = judge
        self._metrics = metrics
        self._interval_s = interval_s
        self._payload = {"model": served_model, "input": text, "response_format": "pcm", "stream_format": "audio"}
        self.text = text
        self._timeout_s = timeout_s
        self._clock = clock
        self._seen: dict[str, int] = {}
        self._loop = BackgroundLoop("quality-probe")

    def start(self) -> None:
        self._loop.start(self._run())

    async def stop(self) -> None:
        await self._loop.stop()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.round()
            except Exception:  # a probe must never end the loop
                log.exception("quality probe round failed")

    def forget_absent(self, present: Set[str]) -> None:
        drop_absent(present, self._seen)

    async def round(self) -> None:
        """Probe each routable worker that had nothing scored since the last round."""
        for worker in list(self._workers()):
            scored = self._judge.last_scored(worker.worker_id)
            quiet = self._seen.get(worker.worker_id) == scored
            self._seen[worker.worker_id] = scored
            if worker.routable and quiet:
                await self.probe(worker)

    async def retest(self, worker: Worker, concurrency: int) -> list[tuple[bytes, Score]] | None:
        """``concurrency`` probes at once (the batch it failed at), each clip with its score;
        None when any request failed (that is the health checks' business, and no pass)."""

        async def one() -> bytes | None:
            try:
                response = await self._client.post(worker.url + SPEECH_PATH, json=self._payload, timeout=self._timeout_s)
            except httpx.HTTPError:
                return None
            return response.content if response.status_code == 200 else None

        clips = await asyncio.gather(*(one() for _ in range(concurrency)))
        outcome = "failed" if any(clip is None for clip in clips) else "scored"
        self._metrics.probes.labels(worker.pool.value, worker.worker_id, outcome).inc(concurrency)
        if outcome == "failed":
            return None
        return [(clip, await asyncio.to_thread(score_pcm, clip)) for clip in clips if clip is not None]

    async def probe(self, worker: Worker) -> bool:
        dispatched = self._clock()
        load = worker.observed_load() + 1  # the batch it is decoded in, every replica's streams counted
        try:
            response = await self._client.post(worker.url + SPEECH_PATH, json=self._payload, timeout=self._timeout_s)
        except httpx.HTTPError as exc:
            log.info("quality probe of %s failed: %s", worker.worker_id, type(exc).__name__)
            self._metrics.probes.labels(worker.pool.value, worker.worker_id, "failed").inc()
            return False
        if response.status_code != 200:
            self._metrics.probes.labels(worker.pool.value, worker.worker_id, "failed").inc()
            return False
        self._metrics.probes.labels(worker.pool.value, worker.worker_id, "scored").inc()
        # The probe's text is ours: its clip is transcribed too where a word error rate is measured.
        sample = Sample(worker.worker_id, worker.pool, load, dispatched, len(self.text), probe=True, text=self.text)
        self._sampler.submit(sample, [response.content])
        return True
