"""PoolSupervisor / WorkerRunner logic with fake processes and a fake clock."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from gateway.config import LaunchConfig
from gateway.supervisor.pool import PoolSupervisor
from gateway.supervisor.worker import RunState
from gateway.types import PoolName

from .fakes import FakeClock, FakeLauncher, RecordingSink, until

W0, W1 = "high_throughput-0", "high_throughput-1"


class World:
    def __init__(self, tmp_path: Path, sleep: Any = None, manual_clock: bool = False, **launch: object) -> None:
        self.sink = RecordingSink()
        self.launcher = FakeLauncher()
        self.clock = FakeClock(manual=manual_clock)
        self.ready: set[str] = set()
        self.ready_errors = False
        settings = {
            "gpus": ["0", "1"],
            "port_start": 9200,
            "restart_backoff_initial_s": 1.0,
            "restart_backoff_max_s": 8.0,
            "crash_loop_restarts": 3,
            "crash_loop_window_s": 100.0,
            "start_timeout_s": 60.0,
            "stop_timeout_s": 5.0,
            **launch,
        }
        self.supervisor = PoolSupervisor(
            PoolName.HIGH_THROUGHPUT,
            LaunchConfig(**settings),  # type: ignore[arg-type]
            Path("/profiles/ht.yaml"),
            self.sink,
            tmp_path,
            "higgs",
            is_ready=self.is_ready,
            launcher=self.launcher,
            clock=self.clock,
            sleep=sleep or self.clock.sleep,
            rng=random.Random(3),
            ready_poll_s=1.0,
        )

    def is_ready(self, worker_id: str) -> bool:
        if self.ready_errors:
            raise RuntimeError("fleet not wired yet")
        return worker_id in self.ready

    def state(self, worker_id: str) -> RunState:
        return next(w.state for w in self.supervisor.workers if w.worker_id == worker_id)


@pytest.fixture
async def world(tmp_path: Path):
    w = World(tmp_path)
    yield w
    await w.supervisor.stop()


async def test_start_announces_every_worker_once(world: World, tmp_path: Path) -> None:
    world.ready.update({W0, W1})
    await world.supervisor.start()
    assert [c for c in world.sink.calls if c[0] == "add"] == [
        ("add", W0, "http://127.0.0.1:9200", True),
        ("add", W1, "http://127.0.0.1:9201", True),
    ]
    await until(lambda: world.state(W0) is RunState.RUNNING and world.state(W1) is RunState.RUNNING)
    status = world.supervisor.workers[0]
    assert status.pid == world.launcher.current(W0).pid
    assert status.log_path == str(tmp_path / "logs" / f"{W0}.log")
    assert "starting high_throughput-0 on GPU 0" in (tmp_path / "logs" / f"{W0}.log").read_text()


async def test_an_exited_worker_is_restarted_with_backoff(world: World) -> None:
    world.ready.update({W0, W1})
    await world.supervisor.start()
    await until(lambda: world.state(W0) is RunState.RUNNING)
    world.launcher.current(W0).exit(-9)
    await until(lambda: world.launcher.launches(W0) == 2)
    assert world.sink.of(W0) == ["add", "restarting"]
    assert 0.75 <= world.clock.sleeps[-1] <= 1.0  # first backoff: initial, minus jitter
    await until(lambda: world.state(W0) is RunState.RUNNING)
    status = next(w for w in world.supervisor.workers if w.worker_id == W0)
    assert (status.restarts, status.last_exit_code) == (1, -9)
    # The other worker never noticed.
    assert world.sink.of(W1) == ["add"] and world.launcher.launches(W1) == 1


async def test_backoff_grows_between_quick_exits(world: World) -> None:
    world.ready.update({W0, W1})
    await world.supervisor.start()
    for launches in (2, 3):
        await until(lambda: world.state(W0) is RunState.RUNNING)
        world.launcher.current(W0).exit(1)
        await until(lambda n=launches: world.launcher.launches(W0) == n)
    # Readiness polls sleep ready_poll_s (1.0); the backoffs are the other sleeps.
    backoffs = [s for s in world.clock.sleeps if s != 1.0]
    assert len(backoffs) == 2 and backoffs[1] > backoffs[0]


async def test_crash_loop_fails_the_worker_and_spares_the_others(world: World) -> None:
    world.launcher.exit_codes[W0] = 1
    world.ready.add(W1)
    await world.supervisor.start()
    await until(lambda: world.state(W0) is RunState.FAILED)
    assert world.launcher.launches(W0) == 3
    assert world.sink.of(W0) == ["add", "restarting", "restarting", "failed"]
    assert "crash loop" in world.sink.reason(W0) and "exit code 1" in world.sink.reason(W0)
    assert world.state(W1) is RunState.RUNNING and world.sink.of(W1) == ["add"]


async def test_exits_spread_beyond_the_window_never_fail(world: World) -> None:
    world.ready.add(W0)
    await world.supervisor.start()
    for launches in range(2, 7):
        await until(lambda: world.state(W0) is RunState.RUNNING)
        world.clock.now += 150.0  # longer than crash_loop_window_s
        world.launcher.current(W0).exit(1)
        await until(lambda n=launches: world.launcher.launches(W0) == n)
    assert "failed" not in world.sink.of(W0)


async def test_start_timeout_kills_and_fails_the_worker(world: World) -> None:
    world.ready.add(W1)
    await world.supervisor.start()
    await until(lambda: world.state(W0) is RunState.FAILED)
    proc = world.launcher.current(W0)
    assert not proc.alive and proc.stopped_with == 5.0
    assert "start timeout" in world.sink.reason(W0)
    assert world.launcher.launches(W0) == 1  # never restarted
    assert world.clock.now >= 60.0
    assert world.state(W1) is RunState.RUNNING


async def test_exit_while_starting_counts_as_an_exit(tmp_path: Path) -> None:
    # Time stands still until the test moves it: the start timeout cannot fire first.
    w = World(tmp_path, manual_clock=True)
    w.ready.add(W1)
    try:
        await w.supervisor.start()
        await until(lambda: w.clock.pending > 0)  # W0 polls for readiness
        assert w.state(W0) is RunState.STARTING
        w.launcher.current(W0).exit(3)
        await until(lambda: w.state(W0) is RunState.BACKOFF)
        assert w.sink.of(W0) == ["add", "restarting"]
        assert w.supervisor.workers[0].last_exit_code == 3
        w.clock.advance(1.0)  # past the first backoff
        await until(lambda: w.launcher.launches(W0) == 2)
    finally:
        await w.supervisor.stop()


async def test_a_broken_readiness_hook_does_not_stop_supervision(world: World) -> None:
    world.ready_errors = True
    await world.supervisor.start()
    await until(lambda: world.state(W0) is RunState.FAILED)  # start timeout, not a crash
    assert "start timeout" in world.sink.reason(W0)


async def test_unexecutable_command_fails_at_once(world: World) -> None:
    world.launcher.unexecutable.add(W0)
    world.ready.add(W1)
    await world.supervisor.start()
    assert world.state(W0) is RunState.FAILED
    assert world.sink.of(W0) == ["add", "failed"]
    assert "cannot start" in world.sink.reason(W0)


async def test_stop_stops_every_process_and_removes_workers(world: World) -> None:
    world.ready.add(W0)
    await world.supervisor.start()
    await until(lambda: world.state(W0) is RunState.RUNNING)
    procs = [world.launcher.current(W0), world.launcher.current(W1)]
    await world.supervisor.stop()
    assert all(not p.alive and p.stopped_with == 5.0 for p in procs)
    assert sorted(c for c in world.sink.calls if c[0] == "remove") == [("remove", W0), ("remove", W1)]
    assert world.supervisor.workers == []


async def test_stop_during_backoff_launches_nothing_more(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def slow_sleep(seconds: float) -> None:
        if seconds >= 500:  # the backoff, not the readiness poll
            await gate.wait()
        else:
            await w.clock.sleep(seconds)

    w = World(tmp_path, sleep=slow_sleep, restart_backoff_initial_s=1000.0, restart_backoff_max_s=1000.0)
    w.ready.add(W0)
    await w.supervisor.start()
    await until(lambda: w.state(W0) is RunState.RUNNING)
    w.launcher.current(W0).exit(1)
    await until(lambda: w.state(W0) is RunState.BACKOFF)
    await w.supervisor.stop()
    gate.set()
    await asyncio.sleep(0.01)
    assert w.launcher.launches(W0) == 1


async def test_supervised_workers_keep_voices_in_their_own_speaker_dir(world: World, tmp_path: Path) -> None:
    await world.supervisor.start()
    dirs = {w: world.launcher.specs[w].env["SPEAKER_SAMPLES_DIR"] for w in (W0, W1)}
    assert dirs == {W0: str(tmp_path / "speakers" / W0), W1: str(tmp_path / "speakers" / W1)}
