"""Open a worker's PCM stream, retrying on another worker until the first byte arrives.

Before the first byte nothing has reached the client, so a refused connection, a 5xx,
a hang or an empty answer can still be hidden by trying another worker (``upstream.retries``
times, by default once), which admission picks (``Admission.retry``) so a slot it handed
to a queued request is never handed out twice. After the first byte, the bytes already
sent cannot be taken back: the stream is ended instead (``OpenStream.failed_mid_stream``).

Each attempt is an ``OpenStream`` that owns its reservation (the slot admission took for
it: the lease) and its upstream response; ``OpenStream.close`` is the one place either is
let go, whatever way the attempt ends. The relay itself only sends, reads the first byte
and decides on a retry: how each attempt went is told once, as an ``AttemptEnded`` event,
and each stream's end once, as a ``StreamEnded`` (``upstream.events``), to the hooks it
was built with (the worker's health, the recorder) and to the request's own watcher (its
``UpstreamCall``, which passes them on to the request's spans when tracing is on).

Whose fault a failed attempt was (and so whether it counts toward the worker's ejection,
whether another worker may try, and what the client is told) is ``upstream.blame``'s
call; the relay only acts on it. A failure that may follow the request (undecided) is
settled by the next attempt: if another worker serves the request, the event of that
attempt names the earlier failures as the workers' (``AttemptEnded.settled``); if the
next worker fails the same way, ``blame.repeated`` makes it the request's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence, Set
from typing import Any, Protocol

from gateway.config import UpstreamConfig
from gateway.types import SPEECH_PATH, PoolName
from gateway.types.decision import Decision
from gateway.types.error_kinds import RETRY_REASON, RetryReason, UpstreamErrorKind
from gateway.types.observations import StreamObservation, StreamOutcome
from gateway.types.reservation import Reservation
from gateway.types.view import RequestInfo
from gateway.upstream import blame
from gateway.upstream.blame import Blame, Verdict
from gateway.upstream.errors import UpstreamError
from gateway.upstream.events import AttemptEnded, AttemptHooks, StreamEnded, UpstreamWorker
from gateway.upstream.pace import PaceMeter
from gateway.upstream.transport import UpstreamResponse, UpstreamTransport

Clock = Callable[[], float]


class HeldSlot(Protocol):
    """A lease on one worker slot (the fleet's ``Lease``): released exactly once."""

    @property
    def worker(self) -> UpstreamWorker: ...
    def release(self) -> None: ...


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


class AttemptWatcher(AttemptHooks, Protocol):
    """The request's own subscriber (its ``UpstreamCall``): it also says what headers each
    attempt carries (the request id, and the attempt's traceparent when tracing)."""

    def headers_for(self, decision: Decision, worker: UpstreamWorker, number: int) -> Mapping[str, str]: ...


class _Spent:
    """The watcher of a closed stream: it has nothing left to tell."""

    def headers_for(self, decision: Decision, worker: UpstreamWorker, number: int) -> Mapping[str, str]:
        raise AssertionError("a closed stream makes no attempt")

    def attempt_ended(self, event: AttemptEnded) -> None:
        pass

    def stream_ended(self, event: StreamEnded) -> None:
        pass


_SPENT = _Spent()


class OpenStream:
    """One attempt on one worker: its lease, its upstream response and what it delivered.

    After ``Relay.open`` returns, ``first_chunk`` holds the first non-empty chunk and
    ``rest`` the others; the caller counts each chunk (``received``, or ``pace.add`` of its
    length) and ends with ``close``, the single release of the lease.
    """

    __slots__ = (
        "lease", "decision", "request", "number", "retry_of", "response", "first_chunk", "rest",
        "load_at_dispatch", "dispatched_at", "connected_at", "status", "pace", "hidden_failures",
        "_relay", "_watcher", "_settled", "_closed", "_cut", "_cut_detail", "tap",
    )  # fmt: skip

    def __init__(
        self, relay: Relay, reservation: Reservation[HeldSlot], request: RequestInfo, number: int,
        retry_of: RetryReason | None, watcher: AttemptWatcher,
    ) -> None:  # fmt: skip
        self.lease = lease = reservation.slot
        self.decision: Decision = reservation.decision
        self.request = request
        self.number = number
        self.retry_of = retry_of
        self.response: UpstreamResponse | None = None
        self.first_chunk = b""
        self.rest: AsyncIterator[bytes] | None = None
        worker = lease.worker
        self.load_at_dispatch = worker.observed_load()  # this lease included
        self.dispatched_at = relay.clock()
        self.connected_at: float | None = None
        self.status: int | None = None
        self.pace = PaceMeter(relay.clock, worker.observed_load)
        self.hidden_failures: tuple[str, ...] = ()  # earlier attempts' failures, for the log
        self._relay = relay
        self._watcher = watcher
        self._settled = False
        self._closed = False
        self._cut: UpstreamErrorKind | None = None
        self._cut_detail: str | None = None
        self.tap: PcmTap | None = None  # a sampled stream's listener (quality), else None

    @property
    def worker(self) -> UpstreamWorker:
        return self.lease.worker

    @property
    def attempts(self) -> int:
        return self.number

    def failed_mid_stream(self, error: UpstreamError) -> UpstreamErrorKind:
        """The stream broke after audio reached the client: no retry, but the worker is
        blamed (told with the stream's end, in ``close``)."""
        kind = UpstreamErrorKind.READ_TIMEOUT if error.kind is UpstreamErrorKind.READ_TIMEOUT else UpstreamErrorKind.STREAM_ERROR
        self._cut, self._cut_detail = kind, error.detail or kind.value
        return kind

    def settle(self, failure: Verdict | None = None, judged: Verdict | None = None, settled: tuple[tuple[UpstreamWorker, Verdict], ...] = ()) -> None:
        """Tell how this attempt went, once: served, failed, or (neither given, no first
        byte) abandoned."""
        if self._settled:
            return
        self._settled = True
        pace = self.pace
        self._relay.tell_attempt(
            AttemptEnded(
                self.request, self.decision, self.worker, self.number, self.retry_of, self.dispatched_at, self.connected_at,
                self.status, pace.first_at if failure is None else None, failure, judged, settled,
            ),
            self._watcher,
        )  # fmt: skip

    async def worker_finished(self) -> None:
        """The worker sent its last chunk: its slot is free from now, fleet-wide (``close``
        still tells how the stream ended)."""
        await self.lease.release_fleet_wide()

    async def close(self, outcome: StreamOutcome) -> None:
        """Release the worker slot, tell how the stream ended and drop the upstream connection; once."""
        if self._closed:
            return
        self._closed = True
        self.lease.release()  # first, and without an await: a cancelled caller still frees it
        try:
            worker, pace, decision = self.lease.worker, self.pace, self.decision
            if self.tap is not None:
                # The batch the audio was decoded in: the most requests the worker carried meanwhile.
                peak = max((sample.load for sample in pace.samples), default=self.load_at_dispatch)
                self.tap.finished(outcome is StreamOutcome.COMPLETED, max(peak, self.load_at_dispatch))
            observation = StreamObservation(
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
            ended = StreamEnded(self.request, worker, self.number, observation, self._relay.clock(), self._cut, self._cut_detail)
            self._relay.tell_stream(ended, self._watcher)
        finally:
            # The watcher (the request's UpstreamCall) holds this stream: kept, the pair is a
            # reference cycle that only the cyclic collector frees, ~30 objects per request
            # whose generation-1 collections stall the event loop for milliseconds under load.
            self._watcher = _SPENT
            if self.response is not None:
                try:
                    # A half-read stream must drop the connection so the worker aborts the request.
                    await self.response.close()
                except Exception:  # closing a broken connection may itself fail; nothing to do
                    pass


class Relay:
    def __init__(
        self,
        transport: UpstreamTransport,
        hooks: Sequence[AttemptHooks],
        admission: RetryAdmission,
        config: UpstreamConfig,
        clock: Clock = time.monotonic,
        *,
        bound_first_byte: bool = True,
        taps: StreamTaps | None = None,
    ) -> None:
        """``hooks``: told of every attempt and stream end (the worker's health, the recorder).
        ``bound_first_byte=False``: no first-byte timer (the simulator's engines run on
        virtual time, where a wall-clock bound means nothing and its timer would only add
        entries to the loop's schedule). ``taps``: who listens to a sampled stream's PCM
        (audio quality), None when nobody does."""
        self._taps = taps
        self._transport = transport
        self._hooks = tuple(hooks)
        self._admission = admission
        self._retries = config.retries
        self._first_byte_timeout_s = config.first_byte_timeout_s if bound_first_byte else None
        self.clock = clock

    def tell_attempt(self, event: AttemptEnded, watcher: AttemptHooks) -> None:
        for hook in self._hooks:
            hook.attempt_ended(event)
        watcher.attempt_ended(event)

    def tell_stream(self, event: StreamEnded, watcher: AttemptHooks) -> None:
        for hook in self._hooks:
            hook.stream_ended(event)
        watcher.stream_ended(event)

    async def open(
        self, reservation: Reservation[HeldSlot], request: RequestInfo, payload: dict[str, Any], watcher: AttemptWatcher
    ) -> OpenStream:
        """The stream of the first worker that produced audio, its first chunk read.

        Owns ``reservation`` (a slot admission already holds) and each retry's from here.
        Raises ``GatewayError`` when every attempt failed (its ``log_detail`` says what each
        worker did); on any exception (cancellation included) every lease it took is released.
        Every attempt is told to the hooks and ``watcher`` once, whatever way it ends.
        """
        tried: set[str] = set()
        undecided: list[tuple[UpstreamWorker, Verdict]] = []  # failures only a later attempt can settle
        history: list[str] = []
        number = 0
        retry_of: RetryReason | None = None
        while True:
            number += 1
            stream = OpenStream(self, reservation, request, number, retry_of, watcher)  # owns the lease from here
            worker = stream.worker
            tried.add(worker.worker_id)
            try:
                judged = await self._attempt(stream, payload, watcher.headers_for(stream.decision, worker, number))
                if judged is None:
                    stream.settle(settled=tuple(undecided))  # another worker served it: those were the workers'
                    stream.hidden_failures = tuple(history)
                    if self._taps is not None:
                        self._listen(stream, payload)
                    return stream
                verdict = blame.repeated([v for _, v in undecided], judged, payload)
                stream.settle(verdict, judged)
            except BaseException as exc:
                outcome = StreamOutcome.CLIENT_DISCONNECTED if isinstance(exc, asyncio.CancelledError) else StreamOutcome.ERROR
                try:
                    stream.settle()  # abandoned (unless it was told already)
                finally:
                    await stream.close(outcome)
                raise
            history.append(f"{worker.worker_id} ({verdict.blame.value}) {verdict.kind.value}: {verdict.detail}")
            if verdict.blame is Blame.UNDECIDED:
                undecided.append((worker, verdict))
            reason = RETRY_REASON.get(verdict.kind) if verdict.retryable else None
            may_retry = reason is not None and number <= self._retries
            await stream.close(StreamOutcome.RETRIED if may_retry else StreamOutcome.ERROR)
            retry = self._admission.retry(request, tried) if may_retry else None
            if retry is None:
                error = verdict.client_error
                error.log_detail = "; ".join(history)
                raise error
            retry_of, reservation = reason, retry

    def _listen(self, stream: OpenStream, payload: dict[str, Any]) -> None:
        """Hand the stream to its tap, when it is sampled, from its first chunk on."""
        assert self._taps is not None
        worker = stream.worker
        text = payload.get("input")
        tap = self._taps.tap(worker.worker_id, worker.pool, stream.load_at_dispatch, stream.dispatched_at, text if isinstance(text, str) else "")
        if tap is not None:
            tap.add(stream.first_chunk)
            stream.tap = tap

    async def _attempt(self, stream: OpenStream, payload: dict[str, Any], headers: Mapping[str, str]) -> Verdict | None:
        """None once the first audio is in hand; else how the attempt failed, judged."""
        worker = stream.worker
        try:
            async with asyncio.timeout(self._first_byte_timeout_s):
                response = stream.response = await self._transport.post_stream(worker.url + SPEECH_PATH, payload, headers)
                stream.connected_at, stream.status = self.clock(), response.status
                if response.status != 200:
                    return blame.judge_status(response.status, await response.read(), payload)
                rest = response.chunks().__aiter__()
                first = b""
                while not first:
                    first = await anext(rest)
        except TimeoutError:
            return blame.judge_silence()
        except StopAsyncIteration:
            return blame.judge_no_audio()
        except UpstreamError as exc:
            return blame.judge_transport(exc)
        stream.first_chunk = first
        stream.rest = rest
        stream.pace.add(len(first))
        return None
