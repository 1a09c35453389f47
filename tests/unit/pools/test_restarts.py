"""Restart detection: a new process behind a worker's address is a new worker.

The detector reads ``process_start_time_seconds`` (or, without it, the voice list); the
fleet makes a restarted worker unroutable until it is prepared again (voices replayed),
resets what it learned about it and tells its restart listeners, whatever the source.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gateway.config import load_config
from gateway.emulator.metrics import EmulatorMetrics, EngineCounts
from gateway.pools.fleet import Fleet
from gateway.pools.specs import load_pool_profiles, pool_specs
from gateway.pools.health import HealthChecker
from gateway.pools.restarts import RestartDetector, parse_start_time
from gateway.pools.worker import Worker
from gateway.types import PoolName, WorkerState
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.types.labels import EjectionReason, RestartReason
from gateway.upstream.worker_errors import worker_lost_a_voice

LL = PoolName.LOW_LATENCY
URL = "http://ll.test:8091"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeWorker:
    """/health, /metrics with a start time (None: no process metrics), /v1/audio/voices."""

    def __init__(self, started: float | None = 1_700_000_000.25, voices: tuple[str, ...] = ()) -> None:
        self.started = started
        self.voices = list(voices)
        self.paths: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.url.path == "/health":
            return httpx.Response(200, json={"status": "healthy"})
        if request.url.path == "/metrics":
            lines = ["# TYPE vllm_omni:num_requests_running gauge", "vllm_omni:num_requests_running 0"]
            if self.started is not None:
                lines += ["# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {self.started!r}"]
            return httpx.Response(200, text="\n".join(lines) + "\n")
        if request.url.path == "/v1/audio/voices":
            return httpx.Response(200, json={"voices": [], "uploaded_voices": [{"name": n} for n in self.voices]})
        return httpx.Response(404)


def client_for(worker: FakeWorker) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(worker.handle))


def make_fleet(tmp_path: Path, clock: Clock) -> Fleet:
    config = load_config(overrides={"data_dir": str(tmp_path)})
    return Fleet.build(config, pool_specs(config, load_pool_profiles(config)), clock=clock)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def ready_worker(fleet: Fleet, worker_id: str = "ll-0") -> Worker:
    fleet.members.add_worker(LL, worker_id, URL)
    worker = fleet.members.get(worker_id)
    assert worker is not None
    fleet.health.probe_succeeded(worker)
    await settle()
    assert worker.state is WorkerState.READY
    return worker


def test_parse_start_time_reads_the_process_collectors_gauge() -> None:
    metrics = EmulatorMetrics("m", lambda: EngineCounts(0, 0, 0), started_at=1_712_345_678.5)
    assert parse_start_time(metrics.exposition().decode()) == 1_712_345_678.5
    text = "process_start_time_seconds_total 5\nprocess_start_time_seconds 1.7e9\n"
    assert parse_start_time(text) == 1.7e9
    assert parse_start_time("vllm:num_requests_running 0\n") is None
    assert parse_start_time("process_start_time_seconds NaN\n") is None


async def test_a_new_start_time_is_a_restart_the_same_one_is_not() -> None:
    fake = FakeWorker(started=1_700_000_000.25)
    async with client_for(fake) as client:
        detector = RestartDetector(client, 1.0)
        worker = Worker("ll-0", LL, URL, slots=4)
        assert await detector.check(worker) is None  # first sight: recorded
        assert worker.process_start_time == 1_700_000_000.25
        assert await detector.check(worker) is None
        fake.started = 1_700_000_321.0
        assert await detector.check(worker) == RestartReason.START_TIME_CHANGED
        assert await detector.check(worker) is None  # the new process is the known one now
        assert "/v1/audio/voices" not in fake.paths  # the start time suffices


async def test_without_a_start_time_a_missing_registered_voice_is_a_restart() -> None:
    fake = FakeWorker(started=None, voices=("anna",))
    registered = {"anna"}

    async def missing(base_url: str) -> bool:
        assert base_url == URL
        return not registered <= set(fake.voices)

    async with client_for(fake) as client:
        detector = RestartDetector(client, 1.0, missing)
        worker = Worker("ll-0", LL, URL, slots=4)
        assert await detector.check(worker) is None
        fake.voices = []
        assert await detector.check(worker, record_only=True) is None  # being prepared: not asked
        assert await detector.check(worker) == RestartReason.VOICES_MISSING


@pytest.mark.parametrize(
    ("message", "lost"),
    [
        ("Unknown voice 'anna'. Higgs-Audio V3 has no built-in speakers. Upload a voice first", True),
        ("Audio file for uploaded voice 'anna' is missing", True),
        ("input must not be empty", False),
    ],
)
def test_a_workers_unknown_voice_answer_is_recognised(message: str, lost: bool) -> None:
    assert worker_lost_a_voice(message) is lost


async def test_a_restart_makes_the_worker_new_until_prepared_again(tmp_path: Path) -> None:
    clock = Clock()
    fleet = make_fleet(tmp_path, clock)
    prepared: list[str] = []
    gate = asyncio.Event()

    async def prepare(worker: Worker) -> None:
        prepared.append(worker.worker_id)
        if len(prepared) > 1:
            await gate.wait()  # the replay after the restart takes a while

    fleet.readiness.set_hook(prepare)
    heard: list[tuple[str, str]] = []
    fleet.events.on_worker_restarted(lambda worker, why: heard.append((worker.worker_id, why)))
    worker = await ready_worker(fleet)
    worker.record_report(3, clock.now)
    worker.count_failure(EjectionReason.HEALTH_PROBE, eject_after=10, now=clock.now)

    fleet.health.worker_restarted(worker, RestartReason.START_TIME_CHANGED)
    assert worker.state is WorkerState.STARTING and not worker.routable
    assert worker.reported_load is None and worker.consecutive_failures == 0 and worker.restarts == 1
    assert heard == [("ll-0", RestartReason.START_TIME_CHANGED)]
    await settle()
    assert prepared == ["ll-0", "ll-0"], "prepared again at once: it answers already"
    assert worker.state is WorkerState.STARTING, "not routable before its voices are replayed"
    fleet.health.worker_restarted(worker, RestartReason.START_TIME_CHANGED)  # noticed again meanwhile: one restart
    assert heard == [("ll-0", RestartReason.START_TIME_CHANGED)]
    gate.set()
    await settle()
    assert worker.state is WorkerState.READY


async def test_a_worker_that_lost_a_voice_on_a_request_is_restarted_not_ejected(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path, Clock())
    heard: list[str] = []
    fleet.events.on_worker_restarted(lambda worker, why: heard.append(why))
    worker = await ready_worker(fleet)
    fleet.health.request_failed(worker, UpstreamErrorKind.VOICE_MISSING, "400: Unknown voice 'anna'", ejecting=False)
    assert heard == [RestartReason.VOICES_MISSING] and worker.state is not WorkerState.EJECTED
    await settle()
    assert worker.state is WorkerState.READY  # replayed (no hook here), routable again


async def test_every_source_reports_restarts_to_the_listeners(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path, Clock())
    heard: list[tuple[str, str]] = []
    fleet.events.on_worker_restarted(lambda worker, why: heard.append((worker.worker_id, why)))
    supervised = await ready_worker(fleet, "ll-sup")
    fleet.members.worker_restarting("ll-sup")  # the supervisor saw the process exit
    assert supervised.state is WorkerState.STARTING
    await ready_worker(fleet, "ll-pod")
    fleet.members.add_worker(LL, "ll-pod", "http://10.0.0.9:8091")  # the same pod at a new address
    moved = fleet.members.get("ll-pod")
    assert moved is not None and moved.url == "http://10.0.0.9:8091" and moved.state is WorkerState.STARTING
    assert moved.restarts == 1
    assert heard == [("ll-sup", "process_exit"), ("ll-pod", "address_changed")]


async def test_the_health_checker_notices_a_restart_between_probes(tmp_path: Path) -> None:
    fake = FakeWorker(started=1_700_000_000.25)
    fleet = make_fleet(tmp_path, Clock())
    heard: list[str] = []
    fleet.events.on_worker_restarted(lambda worker, why: heard.append(why))
    worker = await ready_worker(fleet)
    async with client_for(fake) as client:
        config = load_config(overrides={"data_dir": str(tmp_path)}).health
        checker = HealthChecker(fleet.view, fleet.health, client, config, restarts=RestartDetector(client, 1.0))
        assert await checker.probe_once(worker)
        assert heard == [] and worker.state is WorkerState.READY
        fake.started += 30  # killed and started again between two probes: /health alone says nothing
        assert await checker.probe_once(worker)
        assert heard == [RestartReason.START_TIME_CHANGED]
        await settle()
        assert worker.state is WorkerState.READY and worker.restarts == 1


async def test_a_worker_back_from_ejection_as_a_new_process_is_counted(tmp_path: Path) -> None:
    fake = FakeWorker(started=1_700_000_000.25)
    clock = Clock()
    fleet = make_fleet(tmp_path, clock)
    heard: list[str] = []
    fleet.events.on_worker_restarted(lambda worker, why: heard.append(why))
    worker = await ready_worker(fleet)
    async with client_for(fake) as client:
        config = load_config(overrides={"data_dir": str(tmp_path)}).health
        checker = HealthChecker(fleet.view, fleet.health, client, config, restarts=RestartDetector(client, 1.0))
        assert await checker.probe_once(worker)  # start time recorded
        for _ in range(config.eject_after_failures):  # dead long enough to be ejected
            fleet.health.probe_failed(worker, "ConnectError")
        assert worker.state is WorkerState.EJECTED
        fake.started += 60
        assert await checker.probe_once(worker)  # the half-open probe finds a new process
        assert heard == [RestartReason.START_TIME_CHANGED]
        await settle()
        assert worker.state is WorkerState.READY and worker.restarts == 1
