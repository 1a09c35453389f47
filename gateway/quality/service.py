"""The quality sampling of one gateway, built from ``quality`` in its config.

The relay gets ``sampler`` as its stream taps; ``start``/``stop`` run the scoring thread and
the probe loop with the gateway's lifespan. Nothing here is on the request path but the
sampler's ``tap`` call and the tap's list appends.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from prometheus_client import CollectorRegistry

from gateway.config import QualityConfig
from gateway.pools.members import Members
from gateway.pools.worker import Worker
from gateway.pools.worker_health import WorkerHealth
from gateway.quality.judge import JudgedWorker, QualityJudge
from gateway.quality.metrics import QualityMetrics
from gateway.quality.probe import QualityProbe
from gateway.quality.sampler import QualitySampler, Sample
from gateway.quality.score import Floors, Score


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

        def eject(worker: JudgedWorker, detail: str) -> None:
            assert isinstance(worker, Worker)
            health.quality_failed(worker, detail)

        self.judge = QualityJudge(
            floors_of(config), config.window, config.eject_after_bad,
            worker=members.get, eject=eject, metrics=self.metrics, clock=clock,
        )  # fmt: skip
        self.sampler = QualitySampler(
            config.sample_share,
            min_seconds=config.min_seconds,
            max_seconds=config.max_seconds,
            max_pending=config.max_pending,
            deliver=self._deliver,
            on_dropped=self.metrics.dropped.inc,
        )
        self.probe = (
            QualityProbe(
                lambda: members.workers, client, self.sampler, self.judge, self.metrics,
                interval_s=config.probe_interval_s, text=config.probe_text, served_model=served_model,
                timeout_s=probe_timeout_s, clock=clock,
            )  # fmt: skip
            if config.probe_interval_s > 0
            else None
        )

    def _deliver(self, sample: Sample, score: Score) -> None:
        self.judge.judge(sample, score)

    def start(self) -> None:
        self.sampler.start()
        if self.probe is not None:
            self.probe.start()

    async def stop(self) -> None:
        if self.probe is not None:
            await self.probe.stop()
        await self.sampler.stop()
