"""One supervised worker's life: launch, wait until it answers, restart on exit, give up.

Only this runner touches its process. What it tells the fleet (through the sink):
``add_worker`` at the first launch, ``worker_restarting`` after every exit it restarts
from, ``worker_failed`` when it gives up, ``remove_worker`` when stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from gateway.pools.sink import WorkerSink
from gateway.supervisor.command import WorkerSpec
from gateway.supervisor.logfile import RotatingLog
from gateway.supervisor.process import Launcher, WorkerProcess
from gateway.supervisor.restart import RestartPolicy

log = logging.getLogger("higgs_gateway.supervisor")

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
ReadyProbe = Callable[[], Awaitable[bool]]


class RunState(StrEnum):
    STARTING = "starting"  # process launched, not answering yet
    RUNNING = "running"  # answered once; the fleet's prober watches it from here
    BACKOFF = "backoff"  # exited; waiting before the next launch
    FAILED = "failed"  # crash loop, start timeout or not executable: given up
    STOPPED = "stopped"


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    url: str
    gpu: str
    state: RunState
    pid: int | None
    restarts: int
    last_exit_code: int | None
    reason: str | None
    log_path: str


@dataclass(frozen=True)
class Timing:
    start_timeout_s: float
    stop_timeout_s: float
    ready_poll_s: float = 0.5


class WorkerRunner:
    def __init__(
        self,
        spec: WorkerSpec,
        sink: WorkerSink,
        launcher: Launcher,
        policy: RestartPolicy,
        ready: ReadyProbe,
        log_file: RotatingLog,
        timing: Timing,
        clock: Clock,
        sleep: Sleep,
    ) -> None:
        self.spec = spec
        self._sink = sink
        self._launcher = launcher
        self._policy = policy
        self._ready = ready
        self._log = log_file
        self._timing = timing
        self._clock = clock
        self._sleep = sleep
        self._proc: WorkerProcess | None = None
        self._task: asyncio.Task[None] | None = None
        self._added = False
        self.state = RunState.STOPPED
        self.restarts = 0
        self.last_exit_code: int | None = None
        self.reason: str | None = None

    def status(self) -> WorkerStatus:
        return WorkerStatus(
            worker_id=self.spec.worker_id,
            url=self.spec.url,
            gpu=self.spec.gpu,
            state=self.state,
            pid=self._proc.pid if self._proc is not None and self.state in (RunState.STARTING, RunState.RUNNING) else None,
            restarts=self.restarts,
            last_exit_code=self.last_exit_code,
            reason=self.reason,
            log_path=str(self.spec.log_path),
        )

    async def start(self) -> None:
        """Launch the first process; returns once it is spawned (not once it answers)."""
        launched = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(launched), name=f"supervise-{self.spec.worker_id}")
        await launched

    async def stop(self) -> None:
        """Stop supervising, then SIGTERM/SIGKILL the process group; the fleet forgets the worker."""
        await self._halt()
        self.state = RunState.STOPPED
        if self._added:
            self._sink.remove_worker(self.spec.worker_id)
            self._added = False

    async def restart(self) -> None:
        """Operator restart: a fresh process and a clean crash-loop record (also revives FAILED)."""
        await self._halt()
        self._policy.reset()
        self.reason = None
        if self._added:
            self._sink.worker_restarting(self.spec.worker_id)
        await self.start()

    async def _halt(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        proc, self._proc = self._proc, None
        if proc is not None:
            code = await proc.stop(self._timing.stop_timeout_s)
            self._log.note(f"stopped (exit code {code})")

    async def _run(self, launched: asyncio.Future[None]) -> None:
        try:
            while True:
                proc = await self._launch()
                if not launched.done():
                    launched.set_result(None)
                if proc is None:
                    return
                code = await self._supervise(proc)
                if code is None:
                    return
                if not await self._after_exit(code):
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug here (or in a sink) must fail this one worker visibly, not leave a
            # process nobody watches while the others carry on.
            log.exception("supervising %s crashed", self.spec.worker_id)
            proc, self._proc = self._proc, None
            if proc is not None:
                await proc.kill()
            self._fail(f"supervisor error: {exc!r}")
        finally:
            if not launched.done():
                launched.set_result(None)

    async def _launch(self) -> WorkerProcess | None:
        spec = self.spec
        self.state = RunState.STARTING
        self._log.note(f"starting {spec.worker_id} on GPU {spec.gpu} at {spec.url}: {' '.join(spec.argv)}")
        try:
            self._proc = await self._launcher.launch(spec, self._log)
        except OSError as exc:
            # Not executable / not installed: deterministic, so restarting cannot help.
            self._announce()
            self._fail(f"cannot start {spec.argv[0]!r}: {exc}")
            return None
        self._announce()
        log.info("worker %s started (pid %s) at %s", spec.worker_id, self._proc.pid, spec.url)
        return self._proc

    def _announce(self) -> None:
        if not self._added:
            self._sink.add_worker(self.spec.pool, self.spec.worker_id, self.spec.url, managed=True)
            self._added = True

    async def _supervise(self, proc: WorkerProcess) -> int | None:
        """The exit code once the process exits; None when it never came up (already failed)."""
        exited = asyncio.ensure_future(proc.wait())
        try:
            if not await self._until_ready_or_exit(exited):
                code = await proc.stop(self._timing.stop_timeout_s)
                self.last_exit_code = code
                self._fail(f"start timeout: no answer on /health within {self._timing.start_timeout_s:g}s")
                return None
            if not exited.done():
                self.state = RunState.RUNNING
                self.reason = None
                log.info("worker %s answers", self.spec.worker_id)
            return await exited
        finally:
            exited.cancel()

    async def _until_ready_or_exit(self, exited: asyncio.Future[int]) -> bool:
        """True when it answered or exited; False on the start timeout."""
        deadline = self._clock() + self._timing.start_timeout_s
        while not exited.done():
            try:
                if await self._ready():
                    return True
            except Exception as exc:  # a broken readiness hook must not kill supervision
                log.warning("readiness check for %s failed: %s", self.spec.worker_id, exc)
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            # The injected sleep paces the poll, so tests drive start timeouts on a fake clock.
            pause = asyncio.ensure_future(self._sleep(min(self._timing.ready_poll_s, remaining)))
            try:
                await asyncio.wait({exited, pause}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                pause.cancel()
        return True

    async def _after_exit(self, code: int) -> bool:
        """Record an exit; True to launch again (after the backoff), False when given up."""
        self.last_exit_code = code
        self._proc = None
        self._log.note(f"exited with code {code}")
        decision = self._policy.on_exit(self._clock())
        if decision.give_up:
            self._fail(
                f"crash loop: {decision.exits_in_window} exits within "
                f"{self._policy.crash_loop_window_s:g}s (last exit code {code}); see {self.spec.log_path}"
            )
            return False
        self.restarts += 1
        self.state = RunState.BACKOFF
        self.reason = f"exited with code {code}; restarting in {decision.delay_s:.1f}s"
        log.warning("worker %s %s", self.spec.worker_id, self.reason)
        self._sink.worker_restarting(self.spec.worker_id)
        await self._sleep(decision.delay_s)
        return True

    def _fail(self, reason: str) -> None:
        self.state = RunState.FAILED
        self.reason = reason
        self._proc = None
        self._log.note(f"failed: {reason}")
        log.error("worker %s failed: %s", self.spec.worker_id, reason)
        with contextlib.suppress(Exception):  # the fleet's bookkeeping must not stop other workers
            self._sink.worker_failed(self.spec.worker_id, reason)
