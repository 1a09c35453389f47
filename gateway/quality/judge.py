"""Each worker's recent verdicts, and the call to take a worker out of routing for them.

A worker is ejected (reason ``quality``) when ``eject_after_bad`` of its last ``window`` scored
streams failed a check; the evidence (those verdicts with their scores and decode batch) is
kept on the worker for ``GET /admin/pools`` and logged. It comes back on the half-open rule of
every ejection (one good ``/health`` probe after ``health.half_open_after_s``) with a fresh
window: samples of streams dispatched before it came back are not held against it again.

With a word error rate on (``quality.wer``), the transcribed streams keep a window of their
own (``wer.window``); when it is full and its mean exceeds ``wer.max_wer``, the worker is
ejected for ``quality`` the same way, the evidence being each transcript's rate, word counts
and decode batch (never the words: the texts are the users'). Its half-open re-test then
transcribes the probe clips too.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Set
from typing import Protocol

from gateway.quality.metrics import QualityMetrics
from gateway.quality.sampler import Sample, drop_absent
from gateway.quality.score import Floors, Score, Verdict
from gateway.quality.transcriber import Transcript
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


class _WerRecord:
    __slots__ = ("since", "transcripts", "heard")

    def __init__(self, since: float, window: int) -> None:
        self.since = since
        self.transcripts: deque[dict[str, object]] = deque(maxlen=window)
        self.heard = 0


def transcript_entry(sample: Sample, transcript: Transcript) -> dict[str, object]:
    """What /admin/pools and the log keep of one transcript: numbers only."""
    errors = transcript.errors
    assert errors is not None
    return {
        "wer": round(errors.wer, 3), "batch": sample.load, "probe": sample.probe, "seconds": round(transcript.audio_s, 2),
        "words": errors.reference_words, "heard_words": errors.hypothesis_words,
        "substitutions": errors.substitutions, "deletions": errors.deletions, "insertions": errors.insertions,
    }  # fmt: skip


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
        max_wer: float | None = None,
        wer_window: int = 8,
    ) -> None:
        self._floors = floors
        self._max_wer = max_wer
        self._wer_window = wer_window
        self._wer_records: dict[str, _WerRecord] = {}
        # Workers whose (current) quality ejection was for their word error rate.
        self.wer_ejected: set[str] = set()
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

    def forget_absent(self, present: Set[str]) -> None:
        """Drop the windows and ejections of workers no longer in the fleet."""
        drop_absent(present, self._records, self._wer_records, self.ejected)
        self.wer_ejected.intersection_update(present)

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
            # The last ejection's evidence, its re-test's outcome and the WER window outlive the window.
            **{key: value for key, value in (worker.quality or {}).items() if key in ("ejection", "readmission", "wer")},
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
            self.wer_ejected.discard(worker.worker_id)

    def judge_wer(self, sample: Sample, transcript: Transcript) -> float | None:
        """Record one transcribed stream; eject its worker when its window's mean WER is above
        ``max_wer``. The window's mean, or None when the text had no word to measure."""
        self._metrics.transcribed(sample.pool.value, sample.worker_id, transcript)
        if transcript.errors is None:
            return None
        worker = self._worker(sample.worker_id)
        if worker is None:
            return None
        record = self._wer_records.get(sample.worker_id)
        if record is None or (record.since != worker.state_since and worker.state is WorkerState.READY):
            record = self._wer_records[sample.worker_id] = _WerRecord(worker.state_since, self._wer_window)
        counted = worker.state is WorkerState.READY and sample.dispatched_at >= record.since
        entry = transcript_entry(sample, transcript)
        if counted:
            record.heard += 1
            record.transcripts.append(entry)
        rates = [float(str(t["wer"])) for t in record.transcripts]
        mean = sum(rates) / len(rates) if rates else transcript.errors.wer
        self._metrics.wer_mean.labels(sample.pool.value, sample.worker_id).set(mean)
        wer = {
            "window": len(rates), "wer_window": self._wer_window, "mean": round(mean, 3), "max_wer": self._max_wer,
            "transcribed": record.heard, "last": entry,
        }  # fmt: skip
        if worker.quality is None:
            worker.record_quality({"wer": wer})
        else:
            worker.note_quality("wer", wer)
        full = len(record.transcripts) == self._wer_window
        if counted and full and self._max_wer is not None and mean > self._max_wer:
            self._eject_for_wer(worker, record, mean)
        return mean

    def _eject_for_wer(self, worker: JudgedWorker, record: _WerRecord, mean: float) -> None:
        evidence = list(record.transcripts)
        batch = max(int(str(t["batch"])) for t in evidence)
        detail = (
            f"mean word error rate {mean:.2f} over its last {len(evidence)} transcribed streams, above"
            f" quality.wer.max_wer {self._max_wer:g} (decode batch up to {batch})"
        )
        worker.note_quality("ejection", {"at": round(self._clock(), 3), "detail": detail, "evidence": evidence})
        log.warning(
            "worker %s: audio quality below the floor, out of routing: %s", worker.worker_id, detail,
            extra={"worker": worker.worker_id, "quality": evidence},
        )  # fmt: skip
        self._eject(worker, detail)
        record.transcripts.clear()
        if worker.state is WorkerState.EJECTED:
            self.ejected[worker.worker_id] = (worker.state_since, batch)
            self.wer_ejected.add(worker.worker_id)

    def wer_passes(self, transcripts: list[Transcript | None]) -> tuple[bool, float | None]:
        """Whether a re-test's transcripts pass: every clip heard, their mean WER within max_wer."""
        rates = [t.errors.wer for t in transcripts if t is not None and t.errors is not None]
        if not rates or len(rates) < len(transcripts):
            return False, None
        mean = sum(rates) / len(rates)
        return self._max_wer is None or mean <= self._max_wer, mean

    def floors_pass(self, scores: list[Score]) -> tuple[bool, list[str]]:
        """Whether a re-test's clips pass: fewer failures than eject_after_bad."""
        verdicts = [score.verdict(self._floors).value for score in scores]
        return sum(v != Verdict.OK.value for v in verdicts) < self._eject_after, verdicts
