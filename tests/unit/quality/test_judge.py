"""Sampling share, the bounded queue, and the judge's window, ejection and fresh start."""

from __future__ import annotations

import asyncio
import threading

from prometheus_client import CollectorRegistry

from gateway.quality.judge import QualityJudge
from gateway.quality.metrics import QualityMetrics, batch_label
from gateway.quality.sampler import QualitySampler, Sample
from gateway.quality.score import Floors, Score, Verdict
from gateway.types import PoolName, WorkerState
from tests.unit.quality.fakes import FakeWorker

GOOD = Score(3.0, 12.0, 0.0, 0.05, -20.0)
NOISY = Score(3.0, -4.4, 0.0, 0.0, -15.0)


def judge_for(worker: FakeWorker, ejected: list[str], now: list[float]) -> QualityJudge:
    def eject(w: FakeWorker, detail: str) -> None:  # type: ignore[override]
        ejected.append(detail)
        w.state, w.state_since = WorkerState.EJECTED, now[0]

    return QualityJudge(
        Floors(), 8, 3, worker=lambda _id: worker, eject=eject,  # type: ignore[arg-type]
        metrics=QualityMetrics(CollectorRegistry()), clock=lambda: now[0],
    )  # fmt: skip


def sample(at: float, load: int = 12) -> Sample:
    return Sample("high_throughput-0", PoolName.HIGH_THROUGHPUT, load, at, 40)


def test_three_bad_of_eight_eject_with_the_evidence_then_a_fresh_window_after_readmission() -> None:
    worker, ejected, now = FakeWorker(), [], [10.0]
    judge = judge_for(worker, ejected, now)
    for verdict_score in (GOOD, NOISY, GOOD, NOISY):
        judge.judge(sample(1.0), verdict_score)
    assert ejected == [] and worker.quality is not None and worker.quality["bad_in_window"] == 2
    assert judge.judge(sample(1.0), NOISY) is Verdict.NOISY
    assert len(ejected) == 1 and "3 of its last 5" in ejected[0] and "noisy; decode batch up to 12" in ejected[0]
    evidence = worker.quality["ejection"]["evidence"]  # type: ignore[index]
    assert [e["hnr_db"] for e in evidence] == [-4.4, -4.4, -4.4] and evidence[0]["batch"] == 12
    # Late samples of streams dispatched before it came back never count against it again.
    worker.quality["readmission"] = {"concurrency": 12, "verdicts": ["ok"], "passed": True}
    worker.state, worker.state_since = WorkerState.READY, 20.0
    for _ in range(5):
        judge.judge(sample(15.0), NOISY)
    assert len(ejected) == 1 and worker.quality["bad_in_window"] == 0
    assert "ejection" in worker.quality and "readmission" in worker.quality  # the last ejection's story stays visible
    judge.judge(sample(21.0), GOOD)
    assert worker.quality["window"] == 1


def test_a_clean_worker_is_never_ejected() -> None:
    worker, ejected, now = FakeWorker(), [], [1.0]
    judge = judge_for(worker, ejected, now)
    for _ in range(100):
        judge.judge(sample(0.5), GOOD)
    assert ejected == [] and worker.state is WorkerState.READY


def test_batch_labels_follow_the_graph_sizes() -> None:
    assert [batch_label(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 33, 64, 65)] == [
        "1", "2", "3-4", "3-4", "5-8", "5-8", "9-16", "9-16", "33-64", "33-64", "65+"
    ]  # fmt: skip


async def test_share_is_deterministic_and_a_tap_keeps_at_most_max_seconds_of_whole_streams() -> None:
    delivered: list[Sample] = []
    done = asyncio.Event()

    def deliver(s: Sample, _score: Score) -> None:
        delivered.append(s)
        done.set()

    sampler = QualitySampler(0.25, min_seconds=0.1, max_seconds=1.0, max_pending=4, deliver=deliver, on_dropped=lambda: None)
    assert sampler.tap("w", PoolName.LOW_LATENCY, 1, 0.0, "x") is None  # not started: nothing sampled
    sampler.start()
    taps = [sampler.tap("w", PoolName.LOW_LATENCY, 1, 0.0, "hello") for _ in range(8)]
    assert [t is not None for t in taps] == [True, False, False, False, True, False, False, False]
    first, second = taps[0], taps[4]
    assert first is not None and second is not None
    first.add(b"\x00\x10" * 30000)
    first.add(b"\x00\x10" * 30000)
    assert sum(map(len, first._chunks)) == 48000  # one second of PCM
    second.add(b"\x00\x10" * 24000)
    second.finished(completed=False, peak_load=1)  # a cut stream says nothing about quality
    first.finished(completed=True, peak_load=7)
    await asyncio.wait_for(done.wait(), 10)
    await sampler.stop()
    assert len(delivered) == 1 and delivered[0].text_chars == 5 and delivered[0].load == 7


async def test_a_busy_scorer_drops_and_counts_and_never_blocks() -> None:
    started, release = threading.Event(), threading.Event()
    dropped: list[int] = []

    def slow(pcm: bytes) -> Score:
        started.set()
        release.wait(10)
        return GOOD

    sampler = QualitySampler(
        1.0, min_seconds=0.0, max_seconds=1.0, max_pending=1,
        deliver=lambda _s, _score: None, on_dropped=lambda: dropped.append(1), score=slow,
    )  # fmt: skip
    sampler.start()
    sampler.submit(sample(0.0), [b"\x00\x00"])
    assert await asyncio.to_thread(started.wait, 10)  # the scorer holds the first clip
    sampler.submit(sample(0.0), [b"\x00\x00"])  # queued: the queue is now full
    sampler.submit(sample(0.0), [b"\x00\x00"])  # dropped, counted
    assert dropped == [1]
    release.set()
    await sampler.stop()


async def test_the_share_is_capped_per_worker_per_second() -> None:
    now = [0.0]
    sampler = QualitySampler(
        1.0, min_seconds=0.0, max_seconds=1.0, max_pending=4, deliver=lambda _s, _score: None,
        on_dropped=lambda: None, max_per_s=2.0, clock=lambda: now[0],
    )  # fmt: skip
    sampler.start()
    taken = []
    for step in range(8):  # 8 streams per worker in one second, at share 1.0
        now[0] = step / 8
        taken.append((sampler.tap("a", PoolName.LOW_LATENCY, 1, 0.0, "x") is not None,
                      sampler.tap("b", PoolName.HIGH_THROUGHPUT, 1, 0.0, "x") is not None))  # fmt: skip
    await sampler.stop()
    # Each worker: its first stream, then the first one half a second later (2 a second).
    assert [a for a, _ in taken] == [True, False, False, False, True, False, False, False]
    assert [b for _, b in taken] == [a for a, _ in taken]  # one worker's streams do not use the other's
