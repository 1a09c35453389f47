"""Test doubles for the supervisor: a recording sink, fake processes, a fake clock."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from gateway.supervisor.command import WorkerSpec
from gateway.supervisor.logfile import RotatingLog
from gateway.types import PoolName


@dataclass
class RecordingSink:
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def add_worker(self, pool: PoolName, worker_id: str, url: str, managed: bool = False) -> None:
        self.calls.append(("add", worker_id, url, managed))

    def remove_worker(self, worker_id: str) -> None:
        self.calls.append(("remove", worker_id))

    def worker_restarting(self, worker_id: str) -> None:
        self.calls.append(("restarting", worker_id))

    def worker_failed(self, worker_id: str, reason: str) -> None:
        self.calls.append(("failed", worker_id, reason))

    def of(self, worker_id: str) -> list[str]:
        return [call[0] for call in self.calls if call[1] == worker_id]

    def reason(self, worker_id: str) -> str:
        return next(call[2] for call in self.calls if call[:2] == ("failed", worker_id))


class FakeProcess:
    _pids = itertools.count(1000)

    def __init__(self) -> None:
        self.pid = next(self._pids)
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.stopped_with: float | None = None

    def exit(self, code: int) -> None:
        if not self._exit.done():
            self._exit.set_result(code)

    @property
    def alive(self) -> bool:
        return not self._exit.done()

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    async def stop(self, timeout_s: float) -> int:
        self.stopped_with = timeout_s
        self.exit(-15)
        return await self.wait()

    async def kill(self) -> int:
        self.exit(-9)
        return await self.wait()


class FakeLauncher:
    """``exit_codes[worker_id]``: exit at once with this code (None = keep running)."""

    def __init__(self) -> None:
        self.procs: dict[str, list[FakeProcess]] = {}
        self.exit_codes: dict[str, int | None] = {}
        self.unexecutable: set[str] = set()
        self.specs: dict[str, WorkerSpec] = {}  # the last spec each worker was launched with

    async def launch(self, spec: WorkerSpec, log: RotatingLog) -> FakeProcess:
        if spec.worker_id in self.unexecutable:
            raise FileNotFoundError(2, "No such file or directory", spec.argv[0])
        proc = FakeProcess()
        self.specs[spec.worker_id] = spec
        self.procs.setdefault(spec.worker_id, []).append(proc)
        code = self.exit_codes.get(spec.worker_id)
        if code is not None:
            proc.exit(code)
        return proc

    def current(self, worker_id: str) -> FakeProcess:
        return self.procs[worker_id][-1]

    def launches(self, worker_id: str) -> int:
        return len(self.procs.get(worker_id, []))


class FakeClock:
    """time.monotonic + asyncio.sleep replacement.

    By default sleeping advances time instantly, for tests that only care about order.
    With ``manual=True`` a sleep waits until the test calls ``advance()`` past its
    deadline, so no timeout can fire while the test is still arranging the next event
    (an auto-advancing clock let a 60 s start timeout win against a process exit).
    """

    def __init__(self, manual: bool = False) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._manual = manual
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if not self._manual:
            self.now += seconds
            await asyncio.sleep(0)
            return
        wake = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, wake))
        await wake

    @property
    def pending(self) -> int:
        """Sleeps still waiting for time to pass."""
        return sum(1 for _, wake in self._sleepers if not wake.done())

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [wake for deadline, wake in self._sleepers if deadline <= self.now]
        self._sleepers = [(d, w) for d, w in self._sleepers if d > self.now and not w.done()]
        for wake in due:
            if not wake.done():
                wake.set_result(None)


async def until(predicate: Any, timeout: float = 10.0) -> None:
    """Let the event loop run until ``predicate()`` holds (no wall-clock assertions)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.001)
