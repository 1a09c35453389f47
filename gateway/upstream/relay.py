"""Open a worker's PCM stream, retrying on another worker until the first byte arrives.

Before the first byte nothing has reached the client, so a refused connection, a 5xx,
a hang or an empty answer can still be hidden by trying another worker (``upstream.retries``
times, by default once), which admission picks (``Admission.retry``) so a slot it handed
to a queued request is never handed out twice. After the first byte, the bytes already
sent cannot be taken back: the speech pipeline ends the stream instead.

Each attempt is an ``OpenStream`` that owns its reservation (the slot admission took for
it: the lease) and its upstream response;
``OpenStream.close`` is the one place either is let go, whatever way the attempt ends.
What each attempt showed (its placement, its observation, a failure, a retry) goes into
the request's ``AttemptLog``, which the recorder reads once when the request ends; the
worker's health hears of each attempt at once (it ejects on failures).
Every attempt sends the request's ``x-request-id`` and ``traceparent`` (its ``AttemptTrace``).

Whose fault a failed attempt was (and so whether it counts toward the worker's ejection,
whether another worker may try, and what the client is told) is ``upstream.blame``'s
call; the relay only acts on it. A failure that may follow the request (undecided) is
reported to the worker's health only once another worker served the same request; if the
next worker fails the same way, ``blame.repeated`` makes it the request's and nobody is
counted. Whoever's fault it was, the worker's health hears at once that it failed a request
it had taken (``failed_after_arrival``): a worker that said its engine died, or that refuses
connections right after, has stopped and is taken out of routing without waiting for a count.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Set
from typing import Any, Protocol

from gateway.config import UpstreamConfig
from gateway.telemetry.tracing import UNTRACED, AttemptTrace, UpstreamTrace
from gateway.types import SPEECH_PATH, PoolName
from gateway.types.decision import Decision
from gateway.types.error_kinds import RETRY_REASON, UpstreamErrorKind
from gateway.types.observations import AttemptLog, StreamObservation, StreamOutcome
from gateway.types.reservation import Reservation
from gateway.types.view import RequestInfo
from gateway.upstream.errors import UpstreamError
from gateway.upstream.pace import PaceMeter
from gateway.upstream import blame
from gateway.upstream.blame import Blame, Verdict
from gateway.upstream.transport import UpstreamResponse, UpstreamTransport

Clock = Callable[[], float]


class UpstreamWorker(Protocol):
    """A worker as the relay uses it (the fleet's ``Worker``)."""

    @property
    def worker_id(self) -> str: ...
    @property
    def pool(self) -> PoolName: ...
    @property
    def url(self) -> str: ...
    @property
    def inflight(self) -> int: ...


class HeldSlot(Protocol):
    """A lease on one worker slot (the fleet's ``Lease``): released exactly once."""

    @property
    def worker(self) -> UpstreamWorker: ...
    def release(self) -> None: ...


class AttemptReports(Protocol):
    """Where the relay says how an attempt went (the fleet's ``WorkerHealth``)."""

    def request_succeeded(self, worker: UpstreamWorker) -> None: ...
    def request_failed(self, worker: UpstreamWorker, kind: UpstreamErrorKind, detail: str, ejecting: bool) -> None: ...
    def failed_after_arrival(self, worker: UpstreamWorker, detail: str, engine_dead: bool) -> None: ...


class PcmTap(Protocol):
    """Where a sampled stream's PCM goes as it is relayed (``gateway.quality``)."""

    def add(self, chunk: bytes) -> None: ...
    def finished(self, completed: bool, peak_load: int) -> None: ...


class StreamTaps(Protocol):
    """Who may listen to a stream that produced audio: a tap, or None for most streams."""

    def tap(self, worker_id: str, pool: PoolName, load: int, dispatched_at: float, text: str) -> PcmTap | None: ...


class RetryAdmission(Protocol):
    """Admission's answer to "which other worker?" (``Admission.retry``)."""

    def retry(self, request: RequestInfo, tried: Set[str]) -> Reservation[HeldSlot] | None: ...


class OpenStream:
    """One attempt on one worker: its lease, its upstream response and what it delivered.

    After ``Relay.open`` returns, ``first_chunk`` holds the first non-empty chunk and
    ``rest`` the others; the caller reports each chunk with ``received`` and ends with
    ``close``, the single release of the lease.
    """

    __slots__ = (
        "lease", "decision", "attempts", "response", "first_chunk", "rest", "log",
        "load_at_dispatch", "dispatched_at", "pace", "_closed", "trace", "hidden_failures", "tap",
    )  # fmt: skip

    def __init__(
        self, reservation: Reservation[HeldSlot], attempts: int, log: AttemptLog, clock: Clock, trace: AttemptTrace
    ) -> None:
        self.lease = lease = reservation.slot
        self.decision: Decision = reservation.decision
        self.attempts = attempts
        self.response: UpstreamResponse | None = None
        self.first_chunk = b""
        self.rest: AsyncIterator[bytes] | None = None
        self.log = log
        log.decisions.append(reservation.decision)
        worker = lease.worker
        self.load_at_dispatch = worker.inflight  # our lease included
        self.dispatched_at = clock()
        self.pace = PaceMeter(clock, lambda: worker.inflight)
        self._closed = False
        self.trace = trace
        self.hidden_failures: tuple[str, ...] = ()  # earlier attempts' failures, for the log
        self.tap: PcmTap | None = None  # a sampled stream's listener (quality), else None

    @property
    def worker(self) -> UpstreamWorker:
        return self.lease.worker

    def received(self, chunk: bytes) -> None:
        """Count one upstream chunk (hot path: one clock read per second of audio)."""
        self.pace.add(len(chunk))
        if self.tap is not None:
            self.tap.add(chunk)

    async def close(self, outcome: StreamOutcome) -> None:
        """Release the worker slot, log the attempt and drop the upstream connection; once."""
        if self._closed:
            return
        self._closed = True
        self.lease.release()  # first, and without an await: a cancelled caller still frees it
        worker, pace, decision = self.lease.worker, self.pace, self.decision
        self.trace.closed(outcome, pace.bytes)  # a StrEnum: its own value
        if self.tap is not None:
            # The batch the audio was decoded in: the most requests the worker carried meanwhile.
            peak = max((sample.load for sample in pace.samples), default=self.load_at_dispatch)
            self.tap.finished(outcome is StreamOutcome.COMPLETED, max(peak, self.load_at_dispatch))
        self.log.streams.append(
            StreamObservation(
                worker_id=worker.worker_id,
                pool=worker.pool,
                load_at_dispatch=self.load_at_dispatch,
                ttfp_s=None if pace.first_at is None else pace.first_at - self.dispatched_at,
                pace=tuple(pace.samples),
                outcome=outcome,
                bytes=pace.bytes,
                predicted_ttfp_s=decision.predicted_ttfp_s,
                predicted_rtf=decision.predicted_rtf,
            )
        )
        if self.response is not None:
            try:
                # A half-read stream must drop the connection so the worker aborts the request.
                await self.response.close()
            except Exception:  # closing a broken connection may itself fail; nothing to do
                pass


class _AttemptFailed(Exception):
    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.detail)
        self.verdict = verdict


class Relay:
    def __init__(
        self,
        transport: UpstreamTransport,
        reports: AttemptReports,
        admission: RetryAdmission,
        config: UpstreamConfig,
        clock: Clock = time.monotonic,
        taps: StreamTaps | None = None,
    ) -> None:
        self._taps = taps
        self._transport = transport
        self._reports = reports
        self._admission = admission
        self._config = config
        self._clock = clock

    async def open(
        self,
        reservation: Reservation[HeldSlot],
        request: RequestInfo,
        payload: dict[str, Any],
        log: AttemptLog,
        trace: UpstreamTrace = UNTRACED,
    ) -> OpenStream:
        """The stream of the first worker that produced audio, its first chunk read.

        Owns ``reservation`` (a slot admission already holds) and each retry's from here.
        Raises ``GatewayError`` when every attempt failed (its ``log_detail`` says what each
        worker did); on any exception (cancellation included) every lease it took is released.
        Every attempt is written into ``log``, whatever way it ends.
        """
        tried: set[str] = set()
        undecided: list[tuple[UpstreamWorker, Verdict]] = []  # failures only a later attempt can settle
        history: list[str] = []
        attempts = 0
        while True:
            attempts += 1
            worker = reservation.slot.worker
            attempt = trace.attempt(worker.worker_id, worker.pool, worker.url + SPEECH_PATH, attempts)
            stream = OpenStream(reservation, attempts, log, self._clock, attempt)
            tried.add(worker.worker_id)
            try:
                await self._attempt(stream, payload)
            except _AttemptFailed as exc:
                if exc.verdict.blame is Blame.UNDECIDED:
                    # It took the request and failed it: not counted yet, but a dead engine
                    # (or a refusal after this) takes it out of routing at once.
                    self._reports.failed_after_arrival(worker, exc.verdict.detail, exc.verdict.signature == blame.ENGINE_DEAD)
                verdict = blame.repeated([v for _, v in undecided], exc.verdict, payload)
            except BaseException as exc:
                outcome = StreamOutcome.CLIENT_DISCONNECTED if isinstance(exc, asyncio.CancelledError) else StreamOutcome.ERROR
                await stream.close(outcome)
                raise
            else:
                self._reports.request_succeeded(worker)
                for earlier, failed in undecided:
                    # Another worker served this very request: those failures were the workers'.
                    self._reports.request_failed(earlier, failed.kind, failed.detail, ejecting=True)
                stream.hidden_failures = tuple(history)
                if self._taps is not None:
                    self._listen(stream, payload)
                return stream
            history.append(f"{worker.worker_id} ({verdict.blame.value}) {verdict.kind.value}: {verdict.detail}")
            self._report(worker, verdict, log)
            stream.trace.failed(verdict.kind.value, verdict.detail)
            if verdict.blame is Blame.UNDECIDED:
                undecided.append((worker, verdict))
            reason = RETRY_REASON.get(verdict.kind) if verdict.retryable else None
            may_retry = reason is not None and attempts <= self._config.retries
            await stream.close(StreamOutcome.RETRIED if may_retry else StreamOutcome.ERROR)
            retry = self._admission.retry(request, tried) if may_retry else None
            if retry is None:
                error = verdict.client_error
                error.log_detail = "; ".join(history)
                raise error
            assert reason is not None
            log.retries.append(reason)
            trace.routed(retry.decision, retry=True)
            reservation = retry

    def _listen(self, stream: OpenStream, payload: dict[str, Any]) -> None:
        """Hand the stream to its tap, when it is sampled, from its first chunk on."""
        assert self._taps is not None
        worker = stream.worker
        text = payload.get("input")
        tap = self._taps.tap(worker.worker_id, worker.pool, stream.load_at_dispatch, stream.dispatched_at, text if isinstance(text, str) else "")
        if tap is not None:
            tap.add(stream.first_chunk)
            stream.tap = tap

    def _report(self, worker: UpstreamWorker, verdict: Verdict, log: AttemptLog) -> None:
        """Tell the fleet what the failure says about the worker, and log it for the count."""
        if verdict.blame not in (Blame.REQUEST, Blame.UNDECIDED):
            # Undecided failures are counted (or not) once a later attempt settles them;
            # the request's own are never the worker's business.
            self._reports.request_failed(worker, verdict.kind, verdict.detail, ejecting=verdict.blame is Blame.WORKER)
        log.errors.append((worker.pool, verdict.kind))

    def failed_mid_stream(self, stream: OpenStream, error: UpstreamError) -> UpstreamErrorKind:
        """The stream broke after audio reached the client: no retry, but the worker is blamed."""
        kind = UpstreamErrorKind.READ_TIMEOUT if error.kind is UpstreamErrorKind.READ_TIMEOUT else UpstreamErrorKind.STREAM_ERROR
        self._reports.request_failed(stream.worker, kind, error.detail or kind.value, ejecting=True)
        stream.log.errors.append((stream.worker.pool, kind))
        stream.trace.failed(kind.value, error.detail or kind.value)
        return kind

    async def _attempt(self, stream: OpenStream, payload: dict[str, Any]) -> None:
        worker, trace = stream.worker, stream.trace
        try:
            async with asyncio.timeout(self._config.first_byte_timeout_s):
                response = stream.response = await self._transport.post_stream(worker.url + SPEECH_PATH, payload, trace.headers)
                trace.connected(response.status)
                if response.status != 200:
                    raise _AttemptFailed(blame.judge_status(response.status, await response.read(), payload))
                rest = response.chunks().__aiter__()
                first = b""
                while not first:
                    first = await anext(rest)
        except TimeoutError as exc:
            raise _AttemptFailed(blame.judge_silence()) from exc
        except StopAsyncIteration as exc:
            raise _AttemptFailed(blame.judge_no_audio()) from exc
        except UpstreamError as exc:
            raise _AttemptFailed(blame.judge_transport(exc)) from exc
        trace.first_byte()
        stream.first_chunk = first
        stream.rest = rest
        stream.received(first)

