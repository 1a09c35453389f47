"""The quality sampling of one gateway, built from ``quality`` in its config.

The relay gets ``sampler`` as its stream taps; ``start``/``stop`` run the scoring thread, the
recogniser's process (``quality.wer``) and the probe loop with the gateway's lifespan. Nothing here is on the request path but the
sampler's ``tap`` call and the tap's list appends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx
from prometheus_client import CollectorRegistry

from gateway.config import ConfigError, QualityConfig
from gateway.pools.members import Members
from gateway.pools.worker import Worker
from gateway.pools.worker_health import WorkerHealth
from gateway.quality.judge import JudgedWorker, QualityJudge
from gateway.quality.metrics import QualityMetrics
from gateway.quality.probe import QualityProbe
from gateway.quality.recogniser import missing_extra
from gateway.quality.sampler import QualitySampler, Sample
from gateway.quality.score import Floors, Score
from gateway.quality.transcriber import Transcriber, Transcript

log = logging.getLogger("higgs_gateway.quality")


def floors_of(config: QualityConfig) -> Floors:
    return Floors(
        hnr_floor_db=config.hnr_floor_db,
        max_clipped_share=config.max_clipped_share,
        max_silent_share=config.max_silent_share,
        min_level_dbfs=config.min_level_dbfs,
        max_level_dbfs=config.max_level_dbfs,
    )


class QualityService:
    def __init__(
        self,
        config: QualityConfig,
        registry: CollectorRegistry,
        members: Members,
        health: WorkerHealth,
        client: httpx.AsyncClient,
        served_model: str,
        probe_timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.metrics = QualityMetrics(registry)
        wer = config.wer
        if wer.enabled and (missing := missing_extra()) is not None:
            raise ConfigError(missing)
        # A word error rate of a share of the scored streams, in a child process (quality.wer).
        self.transcriber = (
            Transcriber(wer.max_pending, deliver=self._heard, on_dropped=self.metrics.wer_dropped.inc) if wer.enabled else None
        )

        def eject(worker: JudgedWorker, detail: str) -> None:
            assert isinstance(worker, Worker)
            health.quality_failed(worker, detail)

        self.judge = QualityJudge(
            floors_of(config), config.window, config.eject_after_bad,
            worker=members.get, eject=eject, metrics=self.metrics, clock=clock,
            max_wer=wer.max_wer, wer_window=wer.window,
        )  # fmt: skip
        self.sampler = QualitySampler(
            config.sample_share,
            min_seconds=config.min_seconds,
            max_seconds=config.max_seconds,
            max_pending=config.max_pending,
            max_per_s=config.max_per_s,
            deliver=self._deliver,
            on_dropped=self.metrics.dropped.inc,
            wer_share=wer.sample_share,
            transcribe=self.transcriber.submit if self.transcriber is not None else None,
        )
        # Probes for thin traffic (every probe_interval_s; 0: none) and the half-open re-tests.
        self.probe = QualityProbe(
            lambda: members.workers, client, self.sampler, self.judge, self.metrics,
            interval_s=config.probe_interval_s, text=config.probe_text, served_model=served_model,
            timeout_s=probe_timeout_s, clock=clock,
        )  # fmt: skip
        self._probing = config.probe_interval_s > 0

        self._health = health
        self._members = members
        self._retests: dict[str, asyncio.Task[None]] = {}
        health.set_readmission_gate(self._gate)

    def forget_absent(self) -> None:
        """What sampling, judging and probing keep per worker, for the fleet's workers only
        (called when membership may have changed)."""
        present = {worker.worker_id for worker in self._members.workers}
        self.sampler.forget_absent(present)
        self.judge.forget_absent(present)
        self.probe.forget_absent(present)

    def _gate(self, worker: Worker) -> bool:
        """A worker ejected for quality answered its half-open probe: it comes back only once
        a re-test at the decode batch it failed at scores clean (started here, once)."""
        ejected = self.judge.ejected.get(worker.worker_id)
        if ejected is None or ejected[0] != worker.state_since:
            return True  # not (this) quality ejection: the usual half-open rule alone
        if worker.worker_id not in self._retests:
            concurrency = max(1, min(ejected[1], worker.slots))
            task = asyncio.get_running_loop().create_task(self._retest(worker, concurrency), name=f"quality-retest-{worker.worker_id}")
            self._retests[worker.worker_id] = task
            task.add_done_callback(lambda _t, wid=worker.worker_id: self._retests.pop(wid, None))
        return False

    async def _retest(self, worker: Worker, concurrency: int) -> None:
        clips = await self.probe.retest(worker, concurrency)
        passed, verdicts = (False, []) if clips is None else self.judge.floors_pass([score for _, score in clips])
        readmission: dict[str, object] = {"concurrency": concurrency, "verdicts": verdicts, "passed": passed}
        if clips is not None and worker.worker_id in self.judge.wer_ejected and self.transcriber is not None:
            # Out for its word error rate: the probe clips are heard too, and must be within max_wer.
            text = self.probe.text
            transcripts = await asyncio.gather(*(self.transcriber.transcribe([clip], text) for clip, _ in clips))
            within, mean = self.judge.wer_passes(list(transcripts))
            passed = passed and within
            readmission.update(passed=passed, wer=None if mean is None else round(mean, 3))
        worker.note_quality("readmission", readmission)
        log.info(
            "worker %s: quality re-test at %d concurrent probes %s (%s%s)", worker.worker_id, concurrency,
            "passed" if passed else "failed", ", ".join(verdicts) or "requests failed",
            f"; word error rate {readmission['wer']}" if "wer" in readmission else "",
            extra={"worker": worker.worker_id},
        )  # fmt: skip
        if passed:
            self.judge.ejected.pop(worker.worker_id, None)
            self.judge.wer_ejected.discard(worker.worker_id)
            self._health.readmit(worker)

    def _deliver(self, sample: Sample, score: Score) -> None:
        self.judge.judge(sample, score)

    def _heard(self, sample: Sample, transcript: Transcript) -> None:
        self.judge.judge_wer(sample, transcript)

    def start(self) -> None:
        if self.transcriber is not None:
            self.transcriber.start()
        self.sampler.start()
        if self._probing:
            self.probe.start()

    async def stop(self) -> None:
        for task in list(self._retests.values()):
            task.cancel()
        await asyncio.gather(*self._retests.values(), return_exceptions=True)
        await self.probe.stop()
        await self.sampler.stop()
        if self.transcriber is not None:
            await self.transcriber.stop()
