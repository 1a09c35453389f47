"""Each worker's recent verdicts, and the call to take a worker out of routing for them.

A worker is ejected (reason ``quality``) when ``eject_after_bad`` of its last ``window`` scored
streams failed a check; the evidence (those verdicts with their scores and decode batch) is
kept on the worker for ``GET /admin/pools`` and logged. It comes back on the half-open rule of
every ejection (one good ``/health`` probe after ``health.half_open_after_s``) with a fresh
window: samples of streams dispatched before it came back are not held against it again.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from gateway.quality.metrics import QualityMetrics
from gateway.quality.sampler import Sample
from gateway.quality.score import Floors, Score, Verdict
from gateway.types import WorkerState

log = logging.getLogger("higgs_gateway.quality")

EVIDENCE = 8  # failed samples kept per worker for /admin/pools


class JudgedWorker(Protocol):
    """A worker as the judge reads and records it (the fleet's ``Worker``)."""

    @property
    def worker_id(self) -> str: ...
    @property
    def state(self) -> WorkerState: ...
    @property
    def state_since(self) -> float: ...
    @property
    def quality(self) -> dict[str, object] | None: ...
    def record_quality(self, quality: dict[str, object]) -> None: ...
    def note_quality(self, key: str, value: object) -> None: ...


class _Record:
    __slots__ = ("since", "verdicts", "failures", "scored")

    def __init__(self, since: float, window: int) -> None:
        self.since = since  # the worker's state_since when this window began (its re-admission)
        self.verdicts: deque[bool] = deque(maxlen=window)  # True: failed a check
        self.failures: deque[dict[str, object]] = deque(maxlen=EVIDENCE)
        self.scored = 0


class QualityJudge:
    def __init__(
        self,
        floors: Floors,
        window: int,
        eject_after_bad: int,
        *,
        worker: Callable[[str], JudgedWorker | None],
        eject: Callable[[JudgedWorker, str], None],
        metrics: QualityMetrics,
        clock: Callable[[], float],
    ) -> None:
        self._floors = floors
        self._window = window
        self._eject_after = eject_after_bad
        self._worker = worker
        self._eject = eject
        self._metrics = metrics
        self._clock = clock
        self._records: dict[str, _Record] = {}
        # Workers this judge ejected: the state_since of that ejection and the largest decode
        # batch a failure was seen at (what the half-open re-test runs).
        self.ejected: dict[str, tuple[float, int]] = {}

    def last_scored(self, worker_id: str) -> int:
        record = self._records.get(worker_id)
        return 0 if record is None else record.scored

    def judge(self, sample: Sample, score: Score) -> Verdict:
        """Record one scored stream; eject its worker when its window says so."""
        verdict = score.verdict(self._floors)
        worker = self._worker(sample.worker_id)
        if worker is None:
            return verdict  # gone since
        record = self._records.get(sample.worker_id)
        if record is None or (record.since != worker.state_since and worker.state is WorkerState.READY):
            record = self._records[sample.worker_id] = _Record(worker.state_since, self._window)
        counted = worker.state is WorkerState.READY and sample.dispatched_at >= record.since
        if counted:
            record.scored += 1
            record.verdicts.append(verdict is not Verdict.OK)
            if verdict is not Verdict.OK:
                record.failures.append(
                    {"verdict": verdict.value, "batch": sample.load, "probe": sample.probe, **score.as_dict()}
                )
        bad = sum(record.verdicts)
        share = bad / len(record.verdicts) if record.verdicts else 0.0
        self._metrics.scored(sample.pool.value, sample.worker_id, sample.load, score, verdict, share)
        worker.record_quality({
            "window": len(record.verdicts),
            "bad_in_window": bad,
            "eject_after_bad": self._eject_after,
            "scored": record.scored,
            "last": {"verdict": verdict.value, "batch": sample.load, **score.as_dict()},
            "failures": list(record.failures),
            # The last ejection's evidence and its re-test's outcome outlive the window.
            **{key: value for key, value in (worker.quality or {}).items() if key in ("ejection", "readmission")},
        })  # fmt: skip
        if counted and bad >= self._eject_after:
            self._eject_for(worker, record, bad)
        return verdict

    def _eject_for(self, worker: JudgedWorker, record: _Record, bad: int) -> None:
        verdicts = sorted({str(f["verdict"]) for f in record.failures})
        batches = sorted({int(str(f["batch"])) for f in record.failures})
        detail = (
            f"{bad} of its last {len(record.verdicts)} scored streams failed ({', '.join(verdicts)};"
            f" decode batch up to {batches[-1]})"
        )
        worker.note_quality("ejection", {"at": round(self._clock(), 3), "detail": detail, "evidence": list(record.failures)})
        log.warning(
            "worker %s: audio quality below the floor, out of routing: %s", worker.worker_id, detail,
            extra={"worker": worker.worker_id, "quality": list(record.failures)},
        )  # fmt: skip
        self._eject(worker, detail)
        record.verdicts.clear()
        if worker.state is WorkerState.EJECTED:
            self.ejected[worker.worker_id] = (worker.state_since, batches[-1])

    def floors_pass(self, scores: list[Score]) -> tuple[bool, list[str]]:
        """Whether a re-test's clips pass: fewer failures than eject_after_bad."""
        verdicts = [score.verdict(self._floors).value for score in scores]
        return sum(v != Verdict.OK.value for v in verdicts) < self._eject_after, verdicts
