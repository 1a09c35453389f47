"""Probe texts for thin traffic, and the half-open re-test of a quality ejection, against a
mock worker that answers clean or noisy PCM."""

from __future__ import annotations

import asyncio
import json

import httpx
import numpy as np
from prometheus_client import CollectorRegistry

from gateway.config import QualityConfig
from gateway.pools.worker import Worker
from gateway.quality.service import QualityService
from gateway.types import PoolName, WorkerState

RATE = 24000


def tone(noisy: bool) -> bytes:
    t = np.arange(RATE * 2) / RATE
    signal = 3000 * np.sin(2 * np.pi * 140 * t) + 1500 * np.sin(2 * np.pi * 280 * t)
    if noisy:
        signal = signal + np.random.default_rng(3).normal(0, 9000, t.size)
    return np.clip(signal, -32768, 32767).astype("<i2").tobytes()


class Members:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    @property
    def workers(self) -> list[Worker]:
        return [self.worker]

    def get(self, worker_id: str) -> Worker | None:
        return self.worker if worker_id == self.worker.worker_id else None


class Health:
    def __init__(self) -> None:
        self.gate = None
        self.readmitted: list[str] = []
        self.ejected: list[str] = []

    def set_readmission_gate(self, gate) -> None:  # type: ignore[no-untyped-def]
        self.gate = gate

    def readmit(self, worker: Worker) -> None:
        self.readmitted.append(worker.worker_id)

    def quality_failed(self, worker: Worker, detail: str) -> None:
        self.ejected.append(detail)
        worker.set_state(WorkerState.EJECTED, 5.0, "quality")


def service(noisy: list[bool]) -> tuple[QualityService, Worker, Health, list[dict[str, object]]]:
    sent: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, content=tone(noisy[0]))

    worker = Worker("low_latency-0", PoolName.LOW_LATENCY, "http://w", slots=16, state=WorkerState.READY)
    health = Health()
    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    config = QualityConfig(probe_interval_s=60)
    quality = QualityService(config, CollectorRegistry(), Members(worker), health, client, "higgs", 5.0, lambda: 10.0)  # type: ignore[arg-type]
    return quality, worker, health, sent


async def test_a_quiet_worker_gets_a_probe_text_scored_like_a_stream() -> None:
    quality, worker, _, sent = service([False])
    quality.sampler.start()
    await quality.probe.round()  # the first round only notes what was scored
    assert sent == []
    await quality.probe.round()  # nothing scored since: probed
    assert sent == [{"model": "higgs", "input": QualityConfig().probe_text, "response_format": "pcm", "stream_format": "audio"}]
    for _ in range(200):
        if worker.quality is not None:
            break
        await asyncio.sleep(0.01)
    assert worker.quality is not None and worker.quality["last"]["verdict"] == "ok"  # type: ignore[index]
    await quality.probe.round()  # it was scored since the last round: no probe
    assert len(sent) == 1
    await quality.stop()


async def test_the_half_open_retest_runs_at_the_failing_batch_and_readmits_only_when_clean() -> None:
    noisy = [True]
    quality, worker, health, sent = service(noisy)
    assert health.gate is not None
    worker.set_state(WorkerState.EJECTED, 1.0)
    worker.record_quality({"ejection": {}})
    quality.judge.ejected[worker.worker_id] = (worker.state_since, 12)  # as the judge records it
    assert health.gate(worker) is False  # held: the re-test starts
    await asyncio.gather(*quality._retests.values())
    assert len(sent) == 12 and health.readmitted == []
    assert worker.quality["readmission"] == {"concurrency": 12, "verdicts": ["noisy"] * 12, "passed": False}
    noisy[0] = False  # the fault cleared
    assert health.gate(worker) is False
    await asyncio.gather(*quality._retests.values())
    assert health.readmitted == [worker.worker_id] and worker.quality["readmission"]["passed"] is True  # type: ignore[index]
    worker.set_state(WorkerState.READY, 1.5)
    worker.set_state(WorkerState.EJECTED, 2.0)  # ejected again later for another reason: the usual half-open rule alone
    assert health.gate(worker) is True
    await quality.stop()


async def test_a_worker_gone_from_the_fleet_leaves_nothing_behind_in_sampling_judging_or_probing() -> None:
    """Under discovery and scale-down every new worker brings a new id: what is kept per
    worker must follow the fleet, or it grows for as long as the gateway runs."""
    quality, worker, _, _ = service([False])
    members = quality._members
    quality.sampler.start()
    assert quality.sampler.tap(worker.worker_id, worker.pool, 1, 0.0, "x") is not None  # a worker's first stream
    assert quality.sampler.tap(worker.worker_id, worker.pool, 1, 0.0, "x") is None  # then 1 in 1/share
    quality.judge.ejected[worker.worker_id] = (worker.state_since, 12)
    await quality.probe.round()
    successor = Worker("low_latency-1", PoolName.LOW_LATENCY, "http://w2", slots=16, state=WorkerState.READY)
    members.worker = successor  # type: ignore[attr-defined]
    quality.forget_absent()
    assert worker.worker_id not in quality.judge.ejected
    assert quality.probe._seen == {}
    # Its sampling share starts over: the id, were it to come back, is a new worker's.
    assert quality.sampler.tap(worker.worker_id, worker.pool, 1, 0.0, "x") is not None
    await quality.stop()
