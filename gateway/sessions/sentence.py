"""One sentence's upstream request: admitted, relayed, its audio buffered until its turn.

``SentenceAudio.start`` runs the request in its own task, as ``POST /v1/audio/speech``
would run it: it takes one of the key's stream slots (``SessionStreams``), then sends it as
an ``UpstreamCall`` (admission holds a worker slot, the relay opens the worker's PCM stream
and may retry before the first byte); the chunks queue up here while earlier sentences
play, and the worker's stream is read only while the session's ``AudioBudget`` has room (a
client that stops reading stops the reads). ``cancel`` ends it at once: a queued request
leaves the queue, an open stream is closed (the worker aborts it) and its slot is freed;
the call's ``close`` is the one release. ``chunks`` hands the audio over in order and
raises ``SentenceFailed`` where the request failed. Like a speech request, a sentence's
admission is recorded once, when it ends (``UpstreamRecords``); its attempts reach the
recorder as the relay's events, and its trace (the session's ``sentence``) is told how it
ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from gateway.errors import GatewayError
from gateway.routing.admission import AdmissionRejected
from gateway.sessions.budget import AudioBudget
from gateway.sessions.key import SessionStreams, StreamHold, StreamsTaken
from gateway.telemetry.propagation import Started
from gateway.telemetry.tracing import RecordedSentence
from gateway.types import SlaClass
from gateway.types.decision import Decision
from gateway.types.observations import StreamOutcome
from gateway.types.records import SentenceEnd as SentenceEnd  # re-exported: how a sentence ended
from gateway.types.view import RequestInfo
from gateway.upstream.errors import UpstreamError
from gateway.upstream.call import Upstream, UpstreamCall

Clock = Callable[[], float]
log = logging.getLogger(__name__)


class SentenceFailed(Exception):
    """The sentence's request failed; ``reason`` is what the client is told."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _End:
    __slots__ = ("failure",)

    def __init__(self, failure: SentenceFailed | None) -> None:
        self.failure = failure


# The request's outcome as a sentence's trace names it.
_OUTCOMES = {
    StreamOutcome.COMPLETED: "completed",
    StreamOutcome.CLIENT_DISCONNECTED: "cancelled",
    StreamOutcome.CUT: "cut",
    StreamOutcome.ERROR: "failed",
}
CANCELLED = 499  # as a request whose client left: barge-in, or the session ended


class UpstreamRecords(Protocol):
    """Where an ended sentence's admission is counted (the recorder's ``admission_done``)."""

    def admission_done(self, sla: SlaClass, queue_wait_s: float | None, rejected: str | None) -> None: ...


class SentenceUpstream:
    """What every sentence of every session is sent through: the same upstream calls as a request's."""

    def __init__(self, calls: Upstream, clock: Clock, records: UpstreamRecords) -> None:
        self.calls = calls
        self.clock = clock
        self.records = records


class SentenceAudio:
    def __init__(
        self,
        upstream: SentenceUpstream,
        request: RequestInfo,
        payload: dict[str, Any] | GatewayError,
        on_progress: Callable[[], None],
        trace: Callable[[RequestInfo], Started[RecordedSentence]],
        budget: AudioBudget,
        streams: SessionStreams,
    ) -> None:
        self._upstream = upstream
        self._budget = budget
        self._streams = streams
        self.request = request
        self._payload = payload
        self._on_progress = on_progress  # placed, first audio, ended: the pipeline looks again
        self._trace = trace  # the session's: starts this sentence's trace once it runs
        self._queue: asyncio.Queue[bytes | _End] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.dispatched_at: float | None = None
        self.decision: Decision | None = None  # where admission placed it, once it did
        self.received_bytes = 0
        self.queued_bytes = 0  # received, not yet taken by the delivery (counted in the budget)
        self.first_audio = False
        self.ended = False
        self.placed = asyncio.Event()  # admission placed it, or it ended without a place

    @property
    def predicted_start_at(self) -> float | None:
        """When its first audio was predicted to arrive (its placement's predicted TTFP)."""
        if self.decision is None or self.decision.predicted_ttfp_s is None or self.dispatched_at is None:
            return None
        return self.dispatched_at + self.decision.predicted_ttfp_s

    def start(self) -> None:
        self.dispatched_at = self._upstream.clock()
        self._task = asyncio.create_task(self._run(), name="session-sentence")

    async def cancel(self) -> None:
        """End the request now, wherever it is; returns once its slot is free."""
        task = self._task
        if task is None or task.done():
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self.discard()

    def discard(self) -> None:
        """Its audio will not be sent: give what it holds back to the session's budget."""
        if self.queued_bytes:
            self._budget.taken(self.queued_bytes)
            self.queued_bytes = 0

    async def chunks(self) -> AsyncIterator[bytes]:
        """Worker PCM in order as it arrives; raises ``SentenceFailed`` at a failure."""
        while True:
            item = await self._queue.get()
            if isinstance(item, _End):
                if item.failure is not None:
                    raise item.failure
                return
            self.queued_bytes -= len(item)
            self._budget.taken(len(item))
            yield item

    async def _run(self) -> None:
        upstream = self._upstream
        # Started here, not in ``start``: a task cancelled before it runs never runs its
        # ``finally`` either, and so leaves no span open.
        started = self._trace(self.request)
        trace = started.spans  # None: tracing off
        call: UpstreamCall | None = None
        outcome = StreamOutcome.CLIENT_DISCONNECTED  # unless it ends another way below
        status, error = CANCELLED, None
        failure: SentenceFailed | None = None
        waited_s: float | None = None
        rejected: str | None = None
        hold: StreamHold | None = None
        try:
            if isinstance(self._payload, GatewayError):
                raise self._payload
            hold = await self._streams.take()  # the key's slot first, as an HTTP request's
            call = upstream.calls.call(self.request, self._payload, started.headers, trace)
            await call.open(self._placed)  # owns the worker's slot from admission on
            self.decision = call.decision  # a retry may have moved it
            self._received(call.first_chunk)
            rest, count = call.rest, call.count
            assert rest is not None
            await self._budget.room(self, self._queued)
            async for chunk in rest:
                count(len(chunk))
                self._received(chunk)
                await self._budget.room(self, self._queued)  # the client is behind: the worker waits
            outcome, status = StreamOutcome.COMPLETED, 200
        except StreamsTaken as exc:
            outcome, failure = StreamOutcome.ERROR, SentenceFailed(exc.message)
            status, error = 429, "concurrent_streams_exceeded"
        except UpstreamError as exc:
            assert call is not None  # before the stream opened, the call raises GatewayError
            kind = call.failed_mid_stream(exc)
            outcome, failure = StreamOutcome.CUT, SentenceFailed(f"the worker failed mid-stream ({kind.value})")
            status, error = 502, kind.value
        except GatewayError as exc:  # refused by admission, the voice, or every worker tried
            if isinstance(exc, AdmissionRejected):
                rejected, waited_s = exc.reason, exc.waited_s
            outcome, failure = StreamOutcome.ERROR, SentenceFailed(exc.message)
            status, error = exc.status, exc.code or type(exc).__name__
        except Exception as exc:  # a bug must still end the sentence as failed, not as whole
            log.exception("session sentence failed")
            outcome, failure = StreamOutcome.ERROR, SentenceFailed(f"internal error ({type(exc).__name__})")
            status, error = 500, type(exc).__name__
        finally:
            retries = 0
            if call is not None:
                await call.close(outcome)
                retries = call.retries
                if call.waited_s is not None:
                    waited_s = call.waited_s
            if hold is not None:
                await self._streams.give_back(hold)  # after the worker's slot: both are free now
            upstream.records.admission_done(self.request.sla_class, waited_s, rejected)
            if trace is not None:
                detail = None if failure is None else failure.reason
                trace.ended(SentenceEnd(_OUTCOMES[outcome], status, error, detail, self.decision, retries, self.received_bytes))
            self.ended = True
            self.placed.set()
            self._queue.put_nowait(_End(failure))
            self._on_progress()

    def _placed(self, decision: Decision) -> None:
        self.decision = decision
        self.placed.set()
        self._on_progress()  # placed: the pipeline reports where

    def _queued(self) -> int:
        return self.queued_bytes

    def _received(self, chunk: bytes) -> None:
        self.received_bytes += len(chunk)
        self.queued_bytes += len(chunk)
        self._budget.added(len(chunk))
        self._queue.put_nowait(chunk)
        if not self.first_audio:
            self.first_audio = True
            self._on_progress()
