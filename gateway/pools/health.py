"""Active health probes: ``GET /health`` on every worker, jittered, on one scheduler loop.

A starting worker is probed often (it should become routable as soon as it answers);
a ready one at the configured interval; an ejected one only once per half-open period,
so a sick worker is not hammered and no user request is sent to it meanwhile. After a
good probe the ``RestartDetector`` (when given) checks that the same process answers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

import httpx

from gateway.config import HealthConfig
from gateway.pools.background import BackgroundLoop
from gateway.pools.restarts import RestartDetector
from gateway.pools.view import FleetView
from gateway.pools.worker import Worker
from gateway.pools.worker_health import WorkerHealth
from gateway.types import WorkerState

log = logging.getLogger("higgs_gateway.health")

STARTING_PROBE_INTERVAL_S = 0.25
TICK_S = 0.05


class HealthChecker:
    def __init__(
        self,
        fleet: FleetView,
        health: WorkerHealth,
        client: httpx.AsyncClient,
        config: HealthConfig,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        restarts: RestartDetector | None = None,
    ) -> None:
        self._fleet = fleet
        self._health = health
        self._client = client
        self._config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self._restarts = restarts
        self._next_probe: dict[str, float] = {}
        self._in_flight: set[str] = set()
        self._probes: set[asyncio.Task[None]] = set()  # tracked: cancelled and awaited on stop
        self._loop = BackgroundLoop("health-checker")

    def start(self) -> None:
        self._loop.start(self._run())

    async def stop(self) -> None:
        await self._loop.stop()
        probes, self._probes = list(self._probes), set()
        for probe in probes:
            probe.cancel()
        await asyncio.gather(*probes, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            now = self._clock()
            for worker in list(self._fleet.workers):
                if worker.worker_id in self._in_flight or not self._wants_probe(worker, now):
                    continue
                self._in_flight.add(worker.worker_id)
                probe = asyncio.get_running_loop().create_task(self._probe(worker), name=f"probe-{worker.worker_id}")
                self._probes.add(probe)
                probe.add_done_callback(self._probes.discard)
            await asyncio.sleep(TICK_S)

    def _wants_probe(self, worker: Worker, now: float) -> bool:
        if worker.state in (WorkerState.FAILED, WorkerState.STOPPED):
            return False
        if worker.state is WorkerState.EJECTED:
            return self._health.due_for_half_open(worker)
        return now >= self._next_probe.get(worker.worker_id, 0.0)

    def _schedule_next(self, worker: Worker) -> None:
        base = STARTING_PROBE_INTERVAL_S if worker.state is WorkerState.STARTING else self._config.interval_s
        jitter = 1.0 + self._rng.uniform(-self._config.jitter, self._config.jitter)
        self._next_probe[worker.worker_id] = self._clock() + base * jitter

    async def probe_once(self, worker: Worker) -> bool:
        try:
            response = await self._client.get(f"{worker.url}/health", timeout=self._config.timeout_s)
        except httpx.HTTPError as exc:
            self._health.probe_failed(worker, type(exc).__name__)
            return False
        if response.status_code == 200:
            if self._restarts is not None:
                # Before probe_succeeded: a restarted worker must not look merely healthy, and
                # one back from ejection is counted as restarted when it is a new process. A
                # drained one too (its drain survives): it gets its voices before it is undrained.
                restarted = await self._restarts.check(worker, record_only=worker.state is WorkerState.STARTING)
                if restarted is not None:
                    self._health.worker_restarted(worker, restarted)
            self._health.probe_succeeded(worker)
            return True
        self._health.probe_failed(worker, f"/health answered {response.status_code}")
        return False

    async def _probe(self, worker: Worker) -> None:
        try:
            await self.probe_once(worker)
        except Exception:  # a probe must never kill the scheduler loop
            log.exception("health probe of %s crashed", worker.worker_id)
        finally:
            self._in_flight.discard(worker.worker_id)
            self._schedule_next(worker)
