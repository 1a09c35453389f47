"""Before a worker becomes routable: every stored voice replayed to it, then its warm-up.

The fleet calls ``prepare`` (its prepare hook) when a starting or ejected worker answers
its health probe; raising keeps the worker unready until the next good probe.
"""

from __future__ import annotations

import logging

import httpx

from gateway.config import GatewayConfig, WarmupConfig
from gateway.pools.specs import PoolSpec
from gateway.pools.warmup import batch_sizes_for, warm_up
from gateway.pools.worker import Worker
from gateway.types import PoolName
from gateway.voices.registry import VoiceRegistry

log = logging.getLogger("higgs_gateway")


class WorkerPreparation:
    def __init__(
        self,
        config: GatewayConfig,
        specs: dict[PoolName, PoolSpec],
        voices: VoiceRegistry,
        client: httpx.AsyncClient,
    ) -> None:
        self._config = config
        self._specs = specs
        self._voices = voices
        self._client = client

    async def prepare(self, worker: Worker) -> None:
        report = await self._voices.replay(worker.url)
        if not report.ok:
            raise RuntimeError(f"voice replay incomplete: {report.error or report}")
        warmup = self._warmup_for(worker)
        if warmup is None or not warmup.enabled:
            return
        sizes = batch_sizes_for(worker.pool, warmup, self._specs[worker.pool].max_num_seqs)
        result = await warm_up(self._client, worker.url, self._config.models.served_model_name, warmup, sizes)
        log.info(result.summary(), extra={"worker": worker.worker_id, "pool": worker.pool.value})
        if not result.ok:
            raise RuntimeError(result.summary())

    def _warmup_for(self, worker: Worker) -> WarmupConfig | None:
        """Supervised workers warm as ``launch.warmup`` says, others as ``pools.<pool>.warmup``;
        without it discovered workers get the defaults and static URLs none (their
        operator warms them; a restarted static worker is still replayed its voices)."""
        pool_config = self._config.pools.get(worker.pool)
        if pool_config.launch is not None:
            return pool_config.launch.warmup
        if pool_config.warmup is not None:
            return pool_config.warmup
        if pool_config.discovery.mode != "static":
            return WarmupConfig()
        return None
