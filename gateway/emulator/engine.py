"""A continuous-batching model of a Higgs-Audio V3 worker's Stage 0, on model time.

At most ``max_num_seqs`` requests run; the rest wait. Every step yields one codec frame
per running request; a step that admits new requests also prefills their prompts. Stage 1
(code2wav) turns frames into audio chunks: the first chunk after ``initial_codec_chunk_frames``,
then every ``codec_chunk_frames`` (or one chunk at the end without ``async_chunk``).

The engine never sleeps and never reads a clock except through the injected ``Clock``.
It does not walk step by step either: between two events (a chunk due, an arrival, an
abort) the batch is constant, so it plans a *run* of identical steps and jumps to its end
in one go. The server wakes it only when the next chunk is due, which is what lets one
core carry dozens of streams at time scales where a step is a fraction of a millisecond.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from gateway.emulator.clock import Clock
from gateway.worker.timing import StepModel


class RequestState(Enum):
    PENDING = "pending"  # in the API server (tokenising, building the prompt)
    WAITING = "waiting"  # in the scheduler's queue: all max_num_seqs slots are taken
    RUNNING = "running"  # in the batch
    FINISHED = "finished"  # Stage 0 produced its last frame
    ABORTED = "aborted"  # the client left


@dataclass(eq=False)
class EngineRequest:
    """One speech request as the engine sees it: sizes only, never the text."""

    request_id: str
    prompt_tokens: int
    total_frames: int
    overhead_seconds: float = 0.0  # model time in the API server before the scheduler
    total_steps: int | None = None  # Stage 0 steps when a token budget cut the clip short
    state: RequestState = RequestState.PENDING
    arrived_at: float = math.nan
    enqueue_at: float = math.nan
    scheduled_at: float | None = None
    finished_at: float | None = None
    start_step: int = -1  # steps completed before the one that prefilled this request
    frames_emitted: int = 0
    last_ready_at: float = 0.0
    seq: int = field(default=0, repr=False)

    @property
    def queue_wait(self) -> float | None:
        return None if self.scheduled_at is None else self.scheduled_at - self.enqueue_at


@dataclass(frozen=True)
class ChunkEvent:
    """Audio frames ``[first_frame, first_frame + frames)`` of ``request`` are ready at ``ready_at``."""

    request: EngineRequest
    first_frame: int
    frames: int
    ready_at: float
    final: bool
    batch: int = 1  # requests running in the step that completed this chunk (the audio faults)


class EngineObserver(Protocol):
    def on_steps(self, batch_size: int, steps: int) -> None: ...

    def on_capture(self, batch_size: int) -> None: ...


class NullObserver:
    def on_steps(self, batch_size: int, steps: int) -> None:
        pass

    def on_capture(self, batch_size: int) -> None:
        pass


@dataclass
class _Run:
    """``steps`` identical Stage 0 steps of ``step_seconds`` each over a fixed batch."""

    start: float
    step_seconds: float
    steps: int
    batch: int

    @property
    def end(self) -> float:
        return self.start + self.steps * self.step_seconds

    def truncate_at(self, when: float) -> None:
        """End the run at the first step boundary at or after ``when`` (at least one step)."""
        started = math.ceil((when - self.start) / self.step_seconds - 1e-9)
        self.steps = max(1, min(self.steps, started))


class Engine:
    def __init__(
        self,
        model: StepModel,
        clock: Clock,
        observer: EngineObserver | None = None,
        precaptured: Iterable[int] = (),
    ) -> None:
        self.model = model
        self.clock = clock
        self.observer: EngineObserver = observer or NullObserver()
        self.captured: set[int] = set(precaptured)
        self._seq = itertools.count()
        self._pending: list[tuple[float, int, EngineRequest]] = []
        self._waiting: deque[EngineRequest] = deque()
        self._running: set[EngineRequest] = set()
        self._finishing: set[EngineRequest] = set()  # Stage 0 done, final chunk not out yet
        self._due: list[tuple[int, int, EngineRequest]] = []  # (step index, seq, request)
        self._ready: list[tuple[float, int, ChunkEvent]] = []
        self._run: _Run | None = None
        self._boundary = clock.now()
        self._step_index = 0
        # Sums over the running set, so a step's KV context is O(1) to know.
        self._sum_prompt = 0
        self._sum_start = 0

    # --- what the server and the metrics read ----------------------------------------
    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_finishing(self) -> int:
        """Requests past Stage 0 whose last chunk Stage 1 has not handed over yet."""
        return len(self._finishing)

    @property
    def num_streaming(self) -> int:
        """Running requests Stage 1 is already decoding (first frame out)."""
        return sum(1 for request in self._running if request.frames_emitted > 0)

    @property
    def steps_done(self) -> int:
        return self._step_index

    # --- commands ---------------------------------------------------------------------
    def submit(self, request: EngineRequest) -> None:
        now = self.clock.now()
        self._advance(now)
        request.seq = next(self._seq)
        request.state = RequestState.PENDING
        request.arrived_at = now
        request.enqueue_at = now + request.overhead_seconds
        heapq.heappush(self._pending, (request.enqueue_at, request.seq, request))
        if self._run is not None:
            # The batch of steps starting after the arrival reaches the scheduler changes.
            self._run.truncate_at(request.enqueue_at)

    def abort(self, request: EngineRequest) -> None:
        """Drop a request at once: its slot is free from the next step boundary."""
        now = self.clock.now()
        self._advance(now)
        state = request.state
        if state in (RequestState.FINISHED, RequestState.ABORTED):
            self._finishing.discard(request)
            return
        request.state = RequestState.ABORTED
        if state is RequestState.WAITING:
            self._waiting.remove(request)
        elif state is RequestState.RUNNING:
            self._leave_batch(request)
            if self._run is not None:
                self._run.truncate_at(now)
        # PENDING: left in the heap, skipped when it comes up.

    def poll(self) -> list[ChunkEvent]:
        """Advance to now; return the chunks that are ready, oldest first."""
        now = self.clock.now()
        self._advance(now)
        ready: list[ChunkEvent] = []
        while self._ready and self._ready[0][0] <= now:
            event = heapq.heappop(self._ready)[2]
            if event.final:
                self._finishing.discard(event.request)
            if event.request.state is not RequestState.ABORTED:
                ready.append(event)
        return ready

    def next_wakeup(self) -> float | None:
        """Model time of the next thing worth waking for, or None when idle."""
        candidates = []
        if self._ready:
            candidates.append(self._ready[0][0])
        if self._run is not None:
            candidates.append(self._run.end)
        else:
            arrival = self._next_pending_time()
            if arrival is not None:
                candidates.append(arrival)
        return min(candidates) if candidates else None

    # --- the schedule -------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        while True:
            if self._run is None:
                if not self._running and not self._waiting:
                    arrival = self._next_pending_time()
                    if arrival is None or arrival > now:
                        return
                    self._boundary = max(self._boundary, arrival)
                self._promote_pending(self._boundary)
                if not self._running and not self._waiting:
                    continue
                self._run = self._plan_run(self._boundary)
            if self._run.end > now:
                # Arrivals that reached the scheduler mid-step queue for the next boundary.
                self._promote_pending(now)
                return
            self._complete_run()

    def _next_pending_time(self) -> float | None:
        while self._pending and self._pending[0][2].state is RequestState.ABORTED:
            heapq.heappop(self._pending)
        return self._pending[0][0] if self._pending else None

    def _promote_pending(self, when: float) -> None:
        while self._pending and self._pending[0][0] <= when:
            request = heapq.heappop(self._pending)[2]
            if request.state is RequestState.PENDING:
                request.state = RequestState.WAITING
                self._waiting.append(request)

    def _admit(self, when: float) -> int:
        """Move waiting requests into the batch; return their prompt tokens (the prefill)."""
        prefill = 0
        budget = self.model.max_num_batched_tokens - len(self._running)
        while self._waiting and len(self._running) < self.model.max_num_seqs:
            request = self._waiting[0]
            if prefill and request.prompt_tokens > budget - prefill:
                break  # the step's token budget is spent; it joins the next step
            self._waiting.popleft()
            prefill += request.prompt_tokens
            request.state = RequestState.RUNNING
            request.scheduled_at = when
            request.start_step = self._step_index
            self._running.add(request)
            self._sum_prompt += request.prompt_tokens
            self._sum_start += request.start_step
            self._push_due(request)
        return prefill

    def _plan_run(self, start: float) -> _Run:
        prefill = self._admit(start)
        batch = len(self._running)
        context = self._sum_prompt + batch * self._step_index - self._sum_start
        cost = self.model.step(batch, prefill, context, self.captured)
        if cost.captured_batch_size is not None:
            self.captured.add(cost.captured_batch_size)
            self.observer.on_capture(cost.captured_batch_size)
        run = _Run(start, cost.seconds, 1, batch)
        admitting = self._waiting and batch < self.model.max_num_seqs
        if not prefill and cost.captured_batch_size is None and not admitting:
            # Identical decode steps until the next chunk is due or an arrival joins.
            run.steps = max(1, self._due[0][0] - self._step_index)
            arrival = self._next_pending_time()
            if arrival is not None:
                run.truncate_at(arrival)
        return run

    def _complete_run(self) -> None:
        run = self._run
        assert run is not None
        self._run = None
        self._step_index += run.steps
        self._boundary = run.end
        self.observer.on_steps(run.batch, run.steps)
        while self._due and self._due[0][0] <= self._step_index:
            request = heapq.heappop(self._due)[2]
            if request.state is RequestState.RUNNING:
                self._emit(request, run.end)

    def _emit(self, request: EngineRequest, step_end: float) -> None:
        target = self._next_target(request)
        frames = target - request.frames_emitted
        final = target == request.total_frames
        ready_at = max(step_end + self.model.code2wav_seconds(frames), request.last_ready_at)
        request.last_ready_at = ready_at
        event = ChunkEvent(request, request.frames_emitted, frames, ready_at, final, len(self._running))
        heapq.heappush(self._ready, (ready_at, next(self._seq), event))
        request.frames_emitted = target
        if final:
            request.state = RequestState.FINISHED
            request.finished_at = step_end
            self._leave_batch(request)
            self._finishing.add(request)
        else:
            self._push_due(request)

    def _next_target(self, request: EngineRequest) -> int:
        """Frames Stage 0 must have produced before the request's next chunk leaves."""
        if not self.model.streams_early:
            return request.total_frames
        step = self.model.initial_chunk_frames if request.frames_emitted == 0 else self.model.chunk_frames
        target = request.frames_emitted + step
        # A chunk whose hold-back would reach past the last step is left to the final flush.
        last_step = self.model.rows_before_chunk(request.total_frames, request.total_frames, request.total_steps)
        if self.model.rows_before_chunk(target, request.total_frames) >= last_step:
            return request.total_frames
        return target

    def _push_due(self, request: EngineRequest) -> None:
        # After step j, a request prefilled in step start_step + 1 has j - start_step tokens.
        target = self._next_target(request)
        due = request.start_step + self.model.rows_before_chunk(target, request.total_frames, request.total_steps)
        heapq.heappush(self._due, (due, request.seq, request))

    def _leave_batch(self, request: EngineRequest) -> None:
        self._running.discard(request)
        self._sum_prompt -= request.prompt_tokens
        self._sum_start -= request.start_step
