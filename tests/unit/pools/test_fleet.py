"""The fleet: leases go down exactly once, only transport faults eject, drain persists."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.config import HealthConfig, load_config
from gateway.pools.drains import DrainStore
from gateway.pools.fleet import Fleet
from gateway.pools.specs import load_pool_profiles, pool_specs
from gateway.types import PoolName, WorkerState


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_fleet(tmp_path: Path, clock: Clock | None = None) -> Fleet:
    config = load_config(overrides={"data_dir": str(tmp_path)})
    return Fleet.build(config, pool_specs(config, load_pool_profiles(config)), clock=clock or Clock())


async def ready_worker(fleet: Fleet, worker_id: str = "low_latency-0", pool: PoolName = PoolName.LOW_LATENCY) -> None:
    fleet.members.add_worker(pool, worker_id, "http://127.0.0.1:1/")
    worker = fleet.members.get(worker_id)
    assert worker is not None and worker.state is WorkerState.STARTING
    fleet.health.probe_succeeded(worker)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert worker.state is WorkerState.READY


def test_slots_follow_the_profiles(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    assert fleet.specs[PoolName.LOW_LATENCY].slots_per_worker == 16  # max_num_seqs: a cap only
    assert fleet.specs[PoolName.HIGH_THROUGHPUT].slots_per_worker == 64
    assert fleet.specs[PoolName.HIGH_THROUGHPUT].max_num_seqs == 64


async def test_lease_released_exactly_once(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    await ready_worker(fleet)
    wakeups: list[int] = []
    recounts: list[int] = []
    fleet.events.on_slot_freed(lambda: wakeups.append(1))
    fleet.events.on_capacity_change(lambda: recounts.append(1))
    lease = fleet.leases.lease("low_latency-0")
    worker = fleet.members.get("low_latency-0")
    assert worker is not None and worker.inflight == 1
    lease.release()
    lease.release()
    assert worker.inflight == 0
    assert len(wakeups) == 1
    assert recounts == []  # a freed slot changes no worker's state: pool availability need not recount


async def test_prepare_hook_gates_readiness(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    gate = asyncio.Event()
    calls: list[str] = []

    async def prepare(worker) -> None:  # type: ignore[no-untyped-def]
        calls.append(worker.worker_id)
        await gate.wait()

    fleet.readiness.set_hook(prepare)
    fleet.members.add_worker(PoolName.HIGH_THROUGHPUT, "high_throughput-0", "http://127.0.0.1:1")
    worker = fleet.members.get("high_throughput-0")
    assert worker is not None
    fleet.health.probe_succeeded(worker)
    fleet.health.probe_succeeded(worker)  # a second probe while preparing must not prepare twice
    await asyncio.sleep(0)
    assert worker.state is WorkerState.STARTING and not worker.routable
    gate.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert worker.state is WorkerState.READY
    assert calls == ["high_throughput-0"]


async def test_failed_prepare_stays_unready(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)

    async def prepare(worker) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("voice replay failed")

    fleet.readiness.set_hook(prepare)
    fleet.members.add_worker(PoolName.LOW_LATENCY, "w", "http://127.0.0.1:1")
    worker = fleet.members.get("w")
    assert worker is not None
    fleet.health.probe_succeeded(worker)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert worker.state is WorkerState.STARTING
    assert "voice replay failed" in (worker.last_error or "")


@pytest.mark.parametrize(
    ("kind", "ejecting", "ejected"),
    [("connect", True, True), ("status_5xx", True, True), ("status_5xx", False, False), ("status_4xx", False, False)],
)
async def test_only_transport_failures_eject(tmp_path: Path, kind: str, ejecting: bool, ejected: bool) -> None:
    fleet = make_fleet(tmp_path)
    await ready_worker(fleet)
    worker = fleet.members.get("low_latency-0")
    assert worker is not None
    ejections: list[str] = []
    fleet.events.on_ejection(lambda w, reason: ejections.append(reason))
    for _ in range(HealthConfig().eject_after_failures):
        fleet.health.request_failed(worker, kind, "x", ejecting)
    assert (worker.state is WorkerState.EJECTED) is ejected
    assert ejections == (["request_failures"] if ejected else [])


async def test_a_success_resets_the_failure_count(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    await ready_worker(fleet)
    worker = fleet.members.get("low_latency-0")
    assert worker is not None
    for _ in range(5):
        fleet.health.request_failed(worker, "connect", "refused", True)
        fleet.health.request_succeeded(worker)
    assert worker.state is WorkerState.READY


async def test_half_open_after_ejection(tmp_path: Path) -> None:
    clock = Clock()
    fleet = make_fleet(tmp_path, clock)
    await ready_worker(fleet)
    worker = fleet.members.get("low_latency-0")
    assert worker is not None
    for _ in range(3):
        fleet.health.probe_failed(worker, "ConnectError")
    assert worker.state is WorkerState.EJECTED
    assert not fleet.health.due_for_half_open(worker)
    clock.now += HealthConfig().half_open_after_s
    assert fleet.health.due_for_half_open(worker)
    fleet.health.probe_failed(worker, "still down")  # the half-open probe failed: wait another period
    assert not fleet.health.due_for_half_open(worker)
    clock.now += HealthConfig().half_open_after_s
    fleet.health.probe_succeeded(worker)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert worker.state is WorkerState.READY


async def test_a_quality_ejection_comes_back_only_through_its_gate(tmp_path: Path) -> None:
    clock = Clock()
    fleet = make_fleet(tmp_path, clock)
    await ready_worker(fleet)
    worker = fleet.members.get("low_latency-0")
    assert worker is not None
    asked: list[str] = []
    fleet.health.set_readmission_gate(lambda w: asked.append(w.worker_id) or False)  # re-testing it
    fleet.health.quality_failed(worker, "3 of its last 8 scored streams failed (noisy)")
    assert worker.state is WorkerState.EJECTED and worker.last_error == "quality: 3 of its last 8 scored streams failed (noisy)"
    clock.now += HealthConfig().half_open_after_s
    fleet.health.probe_succeeded(worker)  # /health answers, but the gate holds it
    await asyncio.sleep(0)
    assert asked == ["low_latency-0"] and worker.state is WorkerState.EJECTED
    assert not fleet.health.due_for_half_open(worker)  # the re-test was this period's probe
    fleet.health.readmit(worker)  # the re-test passed
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert worker.state is WorkerState.READY


def test_a_late_probe_keeps_the_reason_a_worker_failed(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    fleet.members.add_worker(PoolName.LOW_LATENCY, "low_latency-0", "http://127.0.0.1:1/", managed=True)
    worker = fleet.members.get("low_latency-0")
    assert worker is not None
    fleet.members.worker_failed("low_latency-0", "start timeout: no answer on /health within 3s")
    fleet.health.probe_failed(worker, "ConnectTimeout")  # sent before the supervisor gave up
    assert worker.state is WorkerState.FAILED
    assert worker.last_error == "start timeout: no answer on /health within 3s"


async def test_drain_survives_a_restart(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    await ready_worker(fleet)
    DrainStore.in_data_dir(tmp_path).set("low_latency-0", True)
    fleet.members.set_drained("low_latency-0", True)
    assert not fleet.view.snapshot().workers[0].routable
    config = load_config(overrides={"data_dir": str(tmp_path)})
    again = Fleet.build(config, pool_specs(config, load_pool_profiles(config)), clock=Clock(), drained=DrainStore.in_data_dir(tmp_path).ids)
    await ready_worker(again)
    worker = again.members.get("low_latency-0")
    assert worker is not None and worker.drained and not worker.routable
    again.members.set_drained("low_latency-0", False)
    assert worker.routable


async def test_drains_written_by_another_replica_are_followed(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    await ready_worker(fleet)
    ours, theirs = DrainStore.in_data_dir(tmp_path), DrainStore.in_data_dir(tmp_path)
    theirs.set("low_latency-0", True)
    assert ours.reload_if_changed()
    fleet.members.apply_drained(ours.ids)
    assert not fleet.view.snapshot().workers[0].routable
    assert not ours.reload_if_changed()  # nothing new
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # unique temp names, cleaned


async def test_reports_include_leases_taken_since(tmp_path: Path) -> None:
    clock = Clock()
    fleet = make_fleet(tmp_path, clock)
    await ready_worker(fleet)
    worker = fleet.members.get("low_latency-0")
    assert worker is not None
    worker.record_report(3, clock.now)  # another gateway replica's 3 requests
    fleet.leases.lease("low_latency-0")
    assert fleet.view.snapshot().workers[0].load == 4
    clock.now += 10  # stale: local count only (fail open)
    assert fleet.view.snapshot().workers[0].load == 1


async def test_a_dead_engine_or_a_refusal_after_a_failure_ejects_at_once(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    await ready_worker(fleet, "low_latency-0")
    await ready_worker(fleet, "low_latency-1")
    dead, stopped = fleet.members.get("low_latency-0"), fleet.members.get("low_latency-1")
    assert dead is not None and stopped is not None
    ejections: list[str] = []
    fleet.events.on_ejection(lambda w, reason: ejections.append(f"{w.worker_id} {reason}"))
    fleet.health.failed_after_arrival(dead, "500: EngineCore encountered an issue.", engine_dead=True)
    fleet.health.failed_after_arrival(stopped, "cut before audio", engine_dead=False)
    assert stopped.state is WorkerState.READY, "one failure that may follow the request is not an ejection"
    fleet.health.request_failed(stopped, "connect", "Connection refused", True)
    assert ejections == ["low_latency-0 engine_dead", "low_latency-1 stopped_listening"]


async def test_a_success_between_a_failure_and_a_refusal_makes_the_refusal_an_ordinary_failure(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    await ready_worker(fleet)
    worker = fleet.members.get("low_latency-0")
    assert worker is not None
    fleet.health.failed_after_arrival(worker, "cut before audio", engine_dead=False)
    fleet.health.request_succeeded(worker)
    fleet.health.request_failed(worker, "connect", "Connection refused", True)
    assert (worker.state, worker.consecutive_failures) == (WorkerState.READY, 1)
