"""Changing a GPU's profile: drain one supervised worker, stop it, start the other pool's
worker on the same GPU and port, and wait until it is warm and routable there.

One change at a time, only after the ``MoveDecider`` saw the same move wanted for the
hold time, never below a pool's minimum. A change is called off (the worker takes
traffic again) when its in-flight requests do not finish within the drain grace: a
request is never cut to change a profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from gateway.config import ProfileChangeConfig
from gateway.pools.worker import Worker
from gateway.supervisor.mix import DesiredMix, Move, MoveDecider
from gateway.supervisor.pool import PoolSupervisor
from gateway.supervisor.worker import RunState
from gateway.types import PoolName, WorkerState
from gateway.types.labels import ProfileChangeResult

log = logging.getLogger("higgs_gateway.supervisor")

Sleep = Callable[[float], Awaitable[None]]
POLL_S = 0.1  # how often a change looks at the worker it drains or waits for
HISTORY = 20  # finished changes kept for the admin view


class Phase(StrEnum):
    DRAINING = "draining"  # no new requests; in-flight ones finishing
    RESTARTING = "restarting"  # stopped; the other profile's worker starting on the GPU
    WARMING = "warming"  # answering; voices replayed and warm-up before it is routable
    DONE = "done"


class ChangeFleet(Protocol):
    """What a change needs of the fleet: the workers, and stopping new requests to one."""

    def get(self, worker_id: str) -> Worker | None: ...

    def set_retiring(self, worker_id: str, retiring: bool) -> Worker | None: ...


class ChangeObserver(Protocol):
    def profile_change_started(self, change: ProfileChange) -> None: ...

    def profile_change_finished(self, change: ProfileChange) -> None: ...


@dataclass
class ProfileChange:
    source: PoolName
    target: PoolName
    worker_id: str  # in the source pool
    gpu: str
    started_at: float  # Unix time, for operators
    phase: Phase = Phase.DRAINING
    new_worker_id: str | None = None  # in the target pool, once started
    result: ProfileChangeResult | None = None
    detail: str = ""
    finished_at: float | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "from_pool": self.source.value,
            "to_pool": self.target.value,
            "worker": self.worker_id,
            "new_worker": self.new_worker_id,
            "gpu": self.gpu,
            "phase": self.phase.value,
            "result": None if self.result is None else self.result.value,
            "detail": self.detail,
            "started_at": round(self.started_at, 3),
            "finished_at": None if self.finished_at is None else round(self.finished_at, 3),
        }


class ProfileChanger:
    def __init__(
        self,
        config: ProfileChangeConfig,
        supervisors: Mapping[PoolName, PoolSupervisor],
        fleet: ChangeFleet,
        desired: DesiredMix,
        *,
        observer: ChangeObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._config = config
        self._supervisors = dict(supervisors)
        self._fleet = fleet
        self._desired = desired
        self._observer = observer
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self.decider = MoveDecider(config.hold_s, config.min_workers)
        self.current: ProfileChange | None = None
        self.recent: deque[ProfileChange] = deque(maxlen=HISTORY)
        self._task: asyncio.Task[None] | None = None

    # ---- the loop -------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="profile-changes")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not end the loop for good
                log.exception("profile change step failed")
            await self._sleep(self._config.interval_s)

    async def step(self) -> ProfileChange | None:
        """Read the desired mix once; make the move it has asked for long enough, if any."""
        running = self.running()
        desired = None
        if running is not None:
            try:
                desired = self._desired.mix_for(sum(running.values()))
            except Exception:  # a planner that cannot answer cannot judge
                log.exception("the desired worker mix could not be read")
        move = self.decider.decide(desired, running, self._clock())
        if move is None:
            return None
        try:
            return await self.change(move)
        finally:
            self.decider.reset()

    def running(self) -> dict[PoolName, int] | None:
        """Live supervised workers per pool; None while any is starting or restarting (a
        fleet in flux is not judged: the hold starts again once it settles)."""
        counts: dict[PoolName, int] = {}
        for pool, supervisor in self._supervisors.items():
            states = [w.state for w in supervisor.workers]
            if any(state in (RunState.STARTING, RunState.BACKOFF) for state in states):
                return None
            counts[pool] = sum(1 for state in states if state is RunState.RUNNING)
        return counts

    # ---- one change -------------------------------------------------------------------------
    async def change(self, move: Move) -> ProfileChange | None:
        worker = self._pick(move.source)
        if worker is None:
            return None
        source, target = self._supervisors[move.source], self._supervisors[move.target]
        gpu = next(w.gpu for w in source.workers if w.worker_id == worker.worker_id)
        change = ProfileChange(move.source, move.target, worker.worker_id, gpu, self._wall())
        self.current = change
        log.warning(
            "profile change: %s on GPU %s leaves %s for %s (wanted for %gs)",
            worker.worker_id, gpu, move.source.value, move.target.value, self._config.hold_s,
        )  # fmt: skip
        if self._observer is not None:
            self._observer.profile_change_started(change)
        try:
            if not await self._drain(worker):
                self._fleet.set_retiring(worker.worker_id, False)
                return self._finish(change, ProfileChangeResult.DRAIN_TIMEOUT,
                                    f"{worker.inflight} request(s) still in flight after {self._config.drain_grace_s:g}s; "
                                    "the worker takes traffic again")  # fmt: skip
            change.phase = Phase.RESTARTING
            spec = await source.release(worker.worker_id)
            change.new_worker_id = await target.adopt(spec.gpu, spec.port)
            return self._finish(change, *await self._until_routable(change, target))
        except asyncio.CancelledError:
            self._fleet.set_retiring(worker.worker_id, False)
            raise
        except Exception as exc:
            log.exception("profile change of %s failed", worker.worker_id)
            return self._finish(change, ProfileChangeResult.FAILED, f"error: {exc!r}")

    def _pick(self, pool: PoolName) -> Worker | None:
        """The routable supervised worker of ``pool`` with the fewest requests in flight."""
        candidates = []
        for status in self._supervisors[pool].workers:
            worker = self._fleet.get(status.worker_id)
            if status.state is RunState.RUNNING and worker is not None and worker.routable:
                candidates.append(worker)
        return min(candidates, key=lambda w: (w.inflight, w.worker_id), default=None)

    async def _drain(self, worker: Worker) -> bool:
        """No new requests; True once none is in flight, False when the grace ran out."""
        self._fleet.set_retiring(worker.worker_id, True)
        deadline = self._clock() + self._config.drain_grace_s
        while worker.inflight > 0:
            remaining = deadline - self._clock()
            if remaining <= 0:
                return False
            await self._sleep(min(POLL_S, remaining))
        return True

    async def _until_routable(self, change: ProfileChange, target: PoolSupervisor) -> tuple[ProfileChangeResult, str]:
        launch = target.launch
        timeout = self._config.ready_timeout_s or launch.start_timeout_s + launch.warmup.timeout_s
        deadline = self._clock() + timeout
        new_id = change.new_worker_id
        assert new_id is not None
        while True:
            worker = self._fleet.get(new_id)
            status = next((w for w in target.workers if w.worker_id == new_id), None)
            if worker is not None and worker.routable:
                return ProfileChangeResult.COMPLETED, f"{new_id} routable in {change.target.value}"
            if status is None or status.state is RunState.FAILED or (worker is not None and worker.state is WorkerState.FAILED):
                reason = status.reason if status is not None else "gone"
                return ProfileChangeResult.FAILED, f"{new_id} failed: {reason}"
            if status.state is RunState.RUNNING:
                change.phase = Phase.WARMING
            remaining = deadline - self._clock()
            if remaining <= 0:
                return ProfileChangeResult.FAILED, f"{new_id} not routable within {timeout:g}s (phase {change.phase.value})"
            await self._sleep(min(POLL_S, remaining))

    def _finish(self, change: ProfileChange, result: ProfileChangeResult, detail: str) -> ProfileChange:
        change.result = result
        change.detail = detail
        change.phase = Phase.DONE
        change.finished_at = self._wall()
        self.current = None
        self.recent.appendleft(change)
        took = change.finished_at - change.started_at
        level = logging.WARNING if result is ProfileChangeResult.COMPLETED else logging.ERROR
        log.log(
            level, "profile change %s -> %s of %s (GPU %s): %s after %.1fs: %s",
            change.source.value, change.target.value, change.worker_id, change.gpu, result.value, took, detail,
        )  # fmt: skip
        if self._observer is not None:
            self._observer.profile_change_finished(change)
        return change

    # ---- what operators see ---------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        pending = self.decider.pending
        return {
            "enabled": True,
            "hold_s": self._config.hold_s,
            "pending": None
            if pending is None
            else {
                "from_pool": pending.move.source.value,
                "to_pool": pending.move.target.value,
                "wanted_for_s": round(max(0.0, self._clock() - pending.since), 3),
            },
            "in_progress": None if self.current is None else self.current.describe(),
            "recent": [change.describe() for change in self.recent],
        }
