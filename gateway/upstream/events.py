"""What the relay says about each upstream request: one event per attempt, one per stream end.

The relay's send path only moves bytes and makes the retry decision; everything else that
wants to know how a worker did subscribes here, as httpx's event hooks keep side effects
out of its send path:

* the worker's health (``HealthReports``: successes, counted failures, dead engines),
* the recorder (routing decisions, upstream errors, retries, each stream's observation for
  the performance model and the prediction-error histograms),
* the request's own call (``UpstreamCall``: its decision, attempts, and its trace's spans
  when tracing is on).

``AttemptEnded`` is told once per attempt, when the attempt is settled: its first audio
arrived, it failed before any, or it was abandoned (the client left, or a bug). ``StreamEnded``
is told once per attempt, when its stream is closed, whichever way. Both are plain data,
built once per attempt, never per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.types import PoolName
from gateway.types.decision import Decision
from gateway.types.error_kinds import RetryReason, UpstreamErrorKind
from gateway.types.observations import StreamObservation, StreamObserver
from gateway.types.view import RequestInfo
from gateway.upstream.blame import ENGINE_DEAD, Blame, Verdict


class UpstreamWorker(Protocol):
    """A worker as the relay uses it (the fleet's ``Worker``, the simulator's ``SimWorker``)."""

    @property
    def worker_id(self) -> str: ...
    @property
    def pool(self) -> PoolName: ...
    @property
    def url(self) -> str: ...
    @property
    def inflight(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    """One attempt on one worker, settled: served (``first_byte_at`` set), failed
    (``failure`` set) or abandoned (neither). Times are the relay's clock."""

    request: RequestInfo
    decision: Decision  # the placement this attempt went to
    worker: UpstreamWorker
    number: int  # 1: the first attempt
    retry_of: RetryReason | None  # why this attempt was made; None: the first
    started_at: float
    connected_at: float | None  # the worker's response headers; None: none came
    status: int | None
    first_byte_at: float | None
    # The failure as judged knowing the attempts before it (``blame.repeated``), and as
    # judged alone (what the worker's health hears at once); None: no failure.
    failure: Verdict | None = None
    judged: Verdict | None = None
    # On success: earlier undecided failures this attempt proved were those workers'.
    settled: tuple[tuple[UpstreamWorker, Verdict], ...] = ()

    @property
    def served(self) -> bool:
        return self.first_byte_at is not None


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """An attempt's stream closed: what it delivered, and the mid-stream failure, if any."""

    request: RequestInfo
    worker: UpstreamWorker
    number: int
    observation: StreamObservation
    ended_at: float
    cut: UpstreamErrorKind | None = None  # failed after audio reached the client
    cut_detail: str | None = None


class AttemptHooks(Protocol):
    def attempt_ended(self, event: AttemptEnded) -> None: ...
    def stream_ended(self, event: StreamEnded) -> None: ...


class AttemptReports(Protocol):
    """Where a worker's health hears how its attempts went (the fleet's ``WorkerHealth``)."""

    def request_succeeded(self, worker: UpstreamWorker) -> None: ...
    def request_failed(self, worker: UpstreamWorker, kind: UpstreamErrorKind, detail: str, ejecting: bool) -> None: ...
    def failed_after_arrival(self, worker: UpstreamWorker, detail: str, engine_dead: bool) -> None: ...


class HealthReports:
    """The worker's health as a subscriber: what each attempt says about its worker.

    A failure that may follow the request (undecided) is counted only once another worker
    served the same request (``settled``); the request's own failures never are. Whoever's
    fault it was, the worker hears at once that it failed a request it had taken: a worker
    that said its engine died, or refuses connections right after, leaves routing at once.
    """

    __slots__ = ("_reports",)

    def __init__(self, reports: AttemptReports) -> None:
        self._reports = reports

    def attempt_ended(self, event: AttemptEnded) -> None:
        reports, worker, failure = self._reports, event.worker, event.failure
        if failure is None:
            if event.first_byte_at is not None:
                reports.request_succeeded(worker)
                for earlier, failed in event.settled:
                    reports.request_failed(earlier, failed.kind, failed.detail, ejecting=True)
            return
        judged = event.judged or failure
        if judged.blame is Blame.UNDECIDED:
            reports.failed_after_arrival(worker, judged.detail, judged.signature == ENGINE_DEAD)
        if failure.blame not in (Blame.REQUEST, Blame.UNDECIDED):
            reports.request_failed(worker, failure.kind, failure.detail, ejecting=failure.blame is Blame.WORKER)

    def stream_ended(self, event: StreamEnded) -> None:
        if event.cut is not None:
            # Audio already reached the client: no retry, but the worker broke its stream.
            self._reports.request_failed(event.worker, event.cut, event.cut_detail or event.cut.value, ejecting=True)


class StreamObservers:
    """Stream observers (the performance model) as a subscriber, where no recorder is (the simulator)."""

    __slots__ = ("_observers",)

    def __init__(self, observers: Sequence[StreamObserver]) -> None:
        self._observers = tuple(observers)

    def attempt_ended(self, event: AttemptEnded) -> None:
        pass

    def stream_ended(self, event: StreamEnded) -> None:
        for observer in self._observers:
            observer.on_stream_done(event.observation)
