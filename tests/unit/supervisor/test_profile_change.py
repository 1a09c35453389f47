"""ProfileChanger: one GPU drained, restarted under the other pool's launch and put back,
with real PoolSupervisors over fake processes, the real fleet members and a fake clock."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from pathlib import Path

import pytest

from gateway.config import LaunchConfig, ProfileChangeConfig
from gateway.pools.events import FleetEvents
from gateway.pools.members import Members
from gateway.pools.readiness import Readiness
from gateway.pools.specs import PoolSpec
from gateway.supervisor.pool import PoolSupervisor
from gateway.supervisor.profile_change import Phase, ProfileChange, ProfileChanger
from gateway.supervisor.worker import RunState
from gateway.types import PoolName, WorkerState
from gateway.types.labels import ProfileChangeResult

from .fakes import FakeClock, FakeLauncher, until

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT


class FakeMix:
    def __init__(self, desired: Mapping[str, int] | None = None) -> None:
        self.desired = desired
        self.broken = False
        self.asked_for: list[dict[str, int]] = []  # the running mixes the changer asked about

    def mix_for(self, running: Mapping[str, int]) -> Mapping[str, int] | None:
        self.asked_for.append(dict(running))
        if self.broken:
            raise RuntimeError("no data")
        return self.desired


class Observed:
    def __init__(self) -> None:
        self.started: list[ProfileChange] = []
        self.finished: list[ProfileChange] = []

    def profile_change_started(self, change: ProfileChange) -> None:
        self.started.append(change)

    def profile_change_finished(self, change: ProfileChange) -> None:
        self.finished.append(change)


class World:
    """1 LL (GPU 0, port 9100) + 1 HT (GPU 1, port 9200); workers the fleet has seen
    answer are made READY, as the health prober and warm-up would."""

    def __init__(self, tmp_path: Path, **change: object) -> None:
        self.clock = FakeClock()
        self.launcher = FakeLauncher()
        specs = {pool: PoolSpec(pool, f"/profiles/{pool.value}.yaml", 8, 8) for pool in PoolName}
        self.members = Members(specs, Readiness(FleetEvents(), self.clock), FleetEvents(), self.clock)
        self.supervisors = {
            pool: PoolSupervisor(
                pool,
                LaunchConfig(gpus=[gpu], port_start=port, start_timeout_s=60.0, stop_timeout_s=5.0),
                Path(f"/profiles/{pool.value}.yaml"),
                self.members,
                tmp_path,
                "higgs",
                is_ready=lambda _wid: True,
                launcher=self.launcher,
                clock=self.clock,
                sleep=self.clock.sleep,
                rng=random.Random(1),
            )
            for pool, gpu, port in ((LL, "0", 9100), (HT, "1", 9200))
        }
        self.mix = FakeMix()
        self.observed = Observed()
        self.never_ready: set[str] = set()
        self.changer = ProfileChanger(
            ProfileChangeConfig(enabled=True, hold_s=60.0, drain_grace_s=30.0, ready_timeout_s=120.0, **change),  # type: ignore[arg-type]
            self.supervisors,
            self.members,
            self.mix,
            observer=self.observed,
            clock=self.clock,
            wall=self.clock,
            sleep=self.sleep,
        )

    async def sleep(self, seconds: float) -> None:
        # Every poll of the changer: whatever answered becomes READY (probe + warm-up).
        for worker in self.members.workers:
            if worker.state is WorkerState.STARTING and worker.worker_id not in self.never_ready:
                worker.set_state(WorkerState.READY, self.clock())
        await self.clock.sleep(seconds)

    async def start(self) -> None:
        for supervisor in self.supervisors.values():
            await supervisor.start()
        await until(lambda: all(w.state is RunState.RUNNING for s in self.supervisors.values() for w in s.workers))
        await self.sleep(0)

    def pools(self) -> dict[str, list[str]]:
        return {pool.value: sorted(w.worker_id for w in s.workers) for pool, s in self.supervisors.items()}

    async def stop(self) -> None:
        for supervisor in self.supervisors.values():
            await supervisor.stop()


@pytest.fixture
async def world(tmp_path: Path):  # type: ignore[no-untyped-def]
    w = World(tmp_path)
    await w.start()
    yield w
    await w.stop()


async def test_nothing_happens_without_a_judgement(world: World) -> None:
    world.mix.desired = None
    for _ in range(5):
        assert await world.changer.step() is None
        world.clock.now += 100.0
    assert world.pools() == {"low_latency": ["low_latency-0"], "high_throughput": ["high_throughput-0"]}


async def test_a_held_mix_moves_the_gpu_after_draining_it(world: World) -> None:
    ll = world.members.get("low_latency-0")
    assert ll is not None and ll.routable
    lease_held = 3
    for _ in range(lease_held):
        ll.lease_taken()
    world.mix.desired = {"low_latency": 0, "high_throughput": 2}
    assert await world.changer.step() is None  # wanted from now on
    assert world.mix.asked_for == [{"low_latency": 1, "high_throughput": 1}]  # the fleet it has
    world.clock.now += 60.0

    async def finish_requests() -> None:
        await until(lambda: ll.retiring)
        assert not ll.routable  # no new requests while the old ones finish
        assert world.launcher.current("low_latency-0").alive
        await world.clock.sleep(5.0)
        for _ in range(lease_held):
            ll.lease_returned()

    finisher = asyncio.create_task(finish_requests())
    change = await world.changer.step()
    await finisher
    assert change is not None and change.result is ProfileChangeResult.COMPLETED, change
    assert (change.source, change.target, change.worker_id, change.new_worker_id, change.gpu) == (
        LL, HT, "low_latency-0", "high_throughput-1", "0",
    )  # fmt: skip
    assert change.phase is Phase.DONE
    # The old process is gone; the new one runs the HT pool's launch on the same GPU and port.
    assert not world.launcher.current("low_latency-0").alive
    spec = world.launcher.specs["high_throughput-1"]
    assert (spec.gpu, spec.port, spec.env["CUDA_VISIBLE_DEVICES"]) == ("0", 9100, "0")
    assert "/profiles/high_throughput.yaml" in spec.argv
    assert world.members.get("low_latency-0") is None
    new = world.members.get("high_throughput-1")
    assert new is not None and new.pool is HT and new.routable and new.url == "http://127.0.0.1:9100"
    assert world.pools() == {"low_latency": [], "high_throughput": ["high_throughput-0", "high_throughput-1"]}
    assert [c.result for c in world.observed.finished] == [ProfileChangeResult.COMPLETED]
    assert world.observed.started == [change]
    described = world.changer.describe()
    assert described["in_progress"] is None and described["pending"] is None
    assert described["recent"][0]["to_pool"] == "high_throughput"  # type: ignore[index]

    # And back: the held opposite mix returns one HT GPU to the low-latency pool.
    world.mix.desired = {"low_latency": 1, "high_throughput": 1}
    assert await world.changer.step() is None
    world.clock.now += 60.0
    back = await world.changer.step()
    assert back is not None and back.result is ProfileChangeResult.COMPLETED
    assert back.new_worker_id == "low_latency-0" and back.source is HT
    assert sorted(w.worker_id for w in world.supervisors[LL].workers) == ["low_latency-0"]


async def test_requests_that_outlast_the_grace_call_the_change_off(world: World) -> None:
    ll = world.members.get("low_latency-0")
    assert ll is not None
    ll.lease_taken()  # never finishes
    world.mix.desired = {"low_latency": 0, "high_throughput": 2}
    await world.changer.step()
    world.clock.now += 60.0
    change = await world.changer.step()
    assert change is not None and change.result is ProfileChangeResult.DRAIN_TIMEOUT
    assert ll.routable and not ll.retiring  # takes traffic again; nothing was cut
    assert world.launcher.current("low_latency-0").alive
    assert world.pools() == {"low_latency": ["low_latency-0"], "high_throughput": ["high_throughput-0"]}
    # The next attempt is held from the start again.
    assert await world.changer.step() is None


async def test_a_new_worker_that_never_becomes_routable_fails_the_change(world: World) -> None:
    world.never_ready.add("high_throughput-1")
    world.mix.desired = {"low_latency": 0, "high_throughput": 2}
    await world.changer.step()
    world.clock.now += 60.0
    change = await world.changer.step()
    assert change is not None and change.result is ProfileChangeResult.FAILED
    assert "not routable within 120s" in change.detail
    assert world.observed.finished[-1].result is ProfileChangeResult.FAILED


async def test_a_minimum_keeps_the_last_worker_of_a_pool(tmp_path: Path) -> None:
    w = World(tmp_path, min_workers={"low_latency": 1})
    await w.start()
    try:
        w.mix.desired = {"low_latency": 0, "high_throughput": 2}
        for _ in range(5):
            assert await w.changer.step() is None
            w.clock.now += 100.0
        assert w.observed.started == []
    finally:
        await w.stop()


async def test_a_planner_that_raises_is_no_judgement(world: World) -> None:
    world.mix.desired = {"low_latency": 0, "high_throughput": 2}
    await world.changer.step()
    world.mix.broken = True
    world.clock.now += 60.0
    assert await world.changer.step() is None
    assert world.changer.decider.pending is None
