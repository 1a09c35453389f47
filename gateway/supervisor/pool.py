"""Supervise one pool's workers: one ``vllm-omni serve`` (or compatible command) per GPU."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from pathlib import Path

from gateway.config import LaunchConfig
from gateway.pools.sink import WorkerSink
from gateway.supervisor.command import SPEAKER_DIR_ENV, WorkerSpec, build_spec, build_specs, check_template, worker_id
from gateway.supervisor.logfile import RotatingLog
from gateway.supervisor.process import Launcher, SubprocessLauncher
from gateway.supervisor.readiness import HealthProbe, IsReady, ask
from gateway.supervisor.restart import RestartPolicy
from gateway.supervisor.worker import Clock, ReadyProbe, Sleep, Timing, WorkerRunner, WorkerStatus
from gateway.types import PoolName


class PoolSupervisor:
    """Starts, watches, restarts and stops the workers of one pool.

    ``is_ready(worker_id)`` (sync or async) says whether the fleet has seen the worker
    answer ``/health``; it only enforces ``launch.start_timeout_s``. Without it the
    supervisor polls ``GET /health`` itself. Crashes of one worker never touch the others.
    """

    def __init__(
        self,
        pool: PoolName,
        launch: LaunchConfig,
        profile_path: Path,
        sink: WorkerSink,
        data_dir: Path,
        served_model_name: str,
        *,
        is_ready: IsReady | None = None,
        launcher: Launcher | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        ready_poll_s: float = 0.5,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        check_template(launch.command)  # a typo fails the gateway's start, not each worker
        self.pool = pool
        self.launch = launch
        self.profile_path = profile_path
        self.log_dir = launch.log_dir or Path(data_dir) / "logs"
        # Each worker's own SPEAKER_SAMPLES_DIR under here (launch.env may name another root).
        self.speakers_root = Path(launch.env.get(SPEAKER_DIR_ENV) or Path(data_dir) / "speakers")
        self._sink = sink
        self._served_model_name = served_model_name
        self._is_ready = is_ready
        self._launcher = launcher or SubprocessLauncher()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._timing = Timing(launch.start_timeout_s, launch.stop_timeout_s, ready_poll_s)
        self._base_env = base_env
        self._runners: dict[str, WorkerRunner] = {}
        self._logs: dict[str, RotatingLog] = {}
        self._probe: HealthProbe | None = None

    @property
    def workers(self) -> list[WorkerStatus]:
        return [runner.status() for runner in self._runners.values()]

    async def start(self) -> None:
        """Launch every worker; returns once all are spawned and announced, not once they answer."""
        if self._runners:
            return
        specs = build_specs(
            self.pool,
            self.launch,
            self.profile_path,
            self._served_model_name,
            self.log_dir,
            self._base_env,
            self.speakers_root,
        )
        if self._is_ready is None:
            self._probe = HealthProbe()
        for spec in specs:
            self._runners[spec.worker_id] = self._runner(spec)
        await asyncio.gather(*(runner.start() for runner in self._runners.values()))

    async def release(self, worker_id: str) -> WorkerSpec:
        """Stop one worker for good (the fleet forgets it) and hand back its GPU and port,
        for another pool to start its own worker there (a profile change)."""
        runner = self._runners.pop(worker_id)
        await runner.stop()
        log_file = self._logs.pop(worker_id, None)
        if log_file is not None:
            log_file.close()
        return runner.spec

    async def adopt(self, gpu: str, port: int) -> str:
        """Start one more worker of this pool on ``gpu`` at ``port`` (a GPU another pool
        released); named with the lowest index this pool does not use. Returns its id."""
        if self._is_ready is None and self._probe is None:
            self._probe = HealthProbe()
        used = {runner.spec.worker_id for runner in self._runners.values()}
        index = next(i for i in range(len(used) + 1) if worker_id(self.pool, i) not in used)
        spec = build_spec(
            self.pool, self.launch, self.profile_path, self._served_model_name, self.log_dir,
            index, gpu, port, self._base_env, self.speakers_root,
        )  # fmt: skip
        runner = self._runners[spec.worker_id] = self._runner(spec)
        await runner.start()
        return spec.worker_id

    def _runner(self, spec: WorkerSpec) -> WorkerRunner:
        log_file = RotatingLog(spec.log_path, self.launch.log_max_bytes, self.launch.log_backups)
        self._logs[spec.worker_id] = log_file
        return WorkerRunner(
            spec=spec,
            sink=self._sink,
            launcher=self._launcher,
            policy=RestartPolicy.from_launch(self.launch, random.Random(self._rng.random())),
            ready=self._ready_probe(spec.worker_id, spec.url),
            log_file=log_file,
            timing=self._timing,
            clock=self._clock,
            sleep=self._sleep,
        )

    async def stop(self) -> None:
        """Stop every worker (SIGTERM, SIGKILL after stop_timeout_s, whole process groups)."""
        await asyncio.gather(*(runner.stop() for runner in self._runners.values()))
        self._runners.clear()
        for log_file in self._logs.values():
            log_file.close()
        self._logs.clear()
        if self._probe is not None:
            await self._probe.aclose()
            self._probe = None

    def _ready_probe(self, worker_id: str, url: str) -> ReadyProbe:
        async def ready() -> bool:
            if self._is_ready is not None:
                return await ask(self._is_ready, worker_id)
            assert self._probe is not None
            return await self._probe(url)

        return ready
