"""One upstream request's whole life: admit -> open -> stream -> close, in one owner.

HTTP speech, a voice session's sentences and the simulator all send their requests
through ``UpstreamCall``; they only deliver its bytes. The call owns what the request holds
at every moment, so one ``except BaseException`` path and one idempotent ``close`` free it
however the request ends:

* from ``admit`` until the relay takes it, the reservation (the worker slot admission
  already holds) is the call's: anything that fails in between (the trace, the caller's
  ``on_placed``) releases it here;
* from ``Relay.open`` on, the relay owns each attempt's lease and releases it on any
  failure before the first byte; once audio flows the open stream is the call's, and
  ``close(outcome)`` is its one release.

The call is also the request's own subscriber to the relay's events: it keeps the request's
latest placement and attempt count, and passes each event on to the request's spans only
when tracing is on (``trace`` None: no tracing code runs for the request at all).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from gateway.types.decision import Decision
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.types.observations import StreamOutcome
from gateway.types.reservation import Reservation
from gateway.types.view import RequestInfo
from gateway.upstream.errors import UpstreamError
from gateway.upstream.events import AttemptEnded, StreamEnded, UpstreamWorker
from gateway.upstream.relay import HeldSlot, OpenStream, PcmTap, Relay, RetryAdmission


class Admits(RetryAdmission, Protocol):
    """Admission as a call uses it (``routing.admission.Admission``)."""

    async def admit(self, request: RequestInfo) -> Reservation[HeldSlot]: ...


class CallTrace(Protocol):
    """A request's spans, when tracing is on: its wait in admission, each routing, and
    each attempt (whose span is the parent the worker's ``traceparent`` names)."""

    def admission_started(self) -> None: ...
    def routed(self, decision: Decision, retry: bool = False) -> None: ...
    def attempt(self, worker: UpstreamWorker, number: int) -> Mapping[str, str]: ...
    def attempt_ended(self, event: AttemptEnded) -> None: ...
    def stream_ended(self, event: StreamEnded) -> None: ...


def _no_count(size: int) -> None:
    raise RuntimeError("the call is not open")


async def _tapped(chunks: AsyncIterator[bytes], tap: PcmTap) -> AsyncIterator[bytes]:
    """The stream's chunks, each also handed to its quality tap as it is relayed."""
    async for chunk in chunks:
        tap.add(chunk)
        yield chunk


class UpstreamCall:
    """One request to the workers. ``open`` admits it and reads its first audio; then
    ``first_chunk``, ``rest`` and ``count`` (each further chunk's length) deliver it, and
    ``close`` ends it, once."""

    __slots__ = (
        "request", "payload", "decision", "waited_s", "attempts", "stream", "first_chunk", "rest", "count",
        "_admission", "_relay", "_headers", "_trace", "_held",
    )  # fmt: skip

    def __init__(
        self, admission: Admits, relay: Relay, request: RequestInfo, payload: dict[str, Any],
        headers: Mapping[str, str], trace: CallTrace | None,
    ) -> None:  # fmt: skip
        self.request = request
        self.payload = payload
        self.decision: Decision | None = None  # the latest placement: admission's, then a retry's
        self.waited_s: float | None = None  # time in admission; None: it never left with a slot
        self.attempts = 0
        self.stream: OpenStream | None = None
        self.first_chunk = b""
        self.rest: AsyncIterator[bytes] | None = None
        # The hot path: the stream's pace meter itself, bound once (one call per chunk).
        self.count: Callable[[int], None] = _no_count
        self._admission = admission
        self._relay = relay
        self._headers = headers  # what every attempt sends without tracing: the request id, the caller's traceparent
        self._trace = trace
        self._held: Reservation[HeldSlot] | None = None

    @property
    def worker(self) -> UpstreamWorker:
        assert self.stream is not None
        return self.stream.worker

    @property
    def retries(self) -> int:
        return max(0, self.attempts - 1)

    @property
    def received_bytes(self) -> int:
        return 0 if self.stream is None else self.stream.pace.bytes

    async def open(self, on_placed: Callable[[Decision], None] | None = None) -> None:
        """Admitted, placed, and the first audio in hand. ``on_placed`` hears admission's
        placement before the worker is asked. Raises what admission raises
        (``AdmissionRejected``) or the relay's ``GatewayError`` when every attempt failed;
        on any exception, cancellation included, nothing is left held."""
        trace = self._trace
        try:
            if trace is not None:
                trace.admission_started()
            reservation = self._held = await self._admission.admit(self.request)
            self.decision, self.waited_s = reservation.decision, reservation.waited_s
            if trace is not None:
                trace.routed(reservation.decision)
            if on_placed is not None:
                on_placed(reservation.decision)
            # The relay owns the slot from its first line (no await before it takes it).
            self._held = None
            stream = self.stream = await self._relay.open(reservation, self.request, self.payload, self)
        except BaseException:
            await self.close(StreamOutcome.ERROR)  # whatever is still held; a no-op otherwise
            raise
        rest = stream.rest
        if stream.tap is not None and rest is not None:
            rest = _tapped(rest, stream.tap)  # a sampled stream only: the rest pay nothing per chunk
        self.first_chunk, self.rest, self.count = stream.first_chunk, rest, stream.pace.add

    def failed_mid_stream(self, error: UpstreamError) -> UpstreamErrorKind:
        """The stream broke after audio flowed: its kind; the worker is told at ``close``."""
        assert self.stream is not None, "before the first byte the relay raises GatewayError"
        return self.stream.failed_mid_stream(error)

    async def worker_finished(self) -> None:
        """The worker's stream ended whole: free its slot before the client hears the end. A
        client that sends its next request at once may reach another replica, which must
        not find the slot still taken (returns when the fleet view knows, bounded)."""
        if self.stream is not None:
            await self.stream.worker_finished()

    async def close(self, outcome: StreamOutcome) -> None:
        """Free what the request holds, once; again is a no-op."""
        held, self._held = self._held, None
        if held is not None:
            held.release()
        if self.stream is not None:
            await self.stream.close(outcome)

    # ---- the relay's watcher: this request's events --------------------------------------
    def headers_for(self, decision: Decision, worker: UpstreamWorker, number: int) -> Mapping[str, str]:
        trace = self._trace
        if trace is None:
            return self._headers
        if number > 1:
            trace.routed(decision, retry=True)
        return trace.attempt(worker, number)

    def attempt_ended(self, event: AttemptEnded) -> None:
        self.decision, self.attempts = event.decision, event.number
        if self._trace is not None:
            self._trace.attempt_ended(event)

    def stream_ended(self, event: StreamEnded) -> None:
        if self._trace is not None:
            self._trace.stream_ended(event)


class Upstream:
    """Where every upstream request starts: admission, then the relay."""

    def __init__(self, admission: Admits, relay: Relay) -> None:
        self.admission = admission
        self.relay = relay

    def call(
        self, request: RequestInfo, payload: dict[str, Any], headers: Mapping[str, str], trace: CallTrace | None = None
    ) -> UpstreamCall:
        return UpstreamCall(self.admission, self.relay, request, payload, headers, trace)
