"""Runs the engine on the event loop: wakes it only when something is due.

The engine is pure; this driver owns the one timer. Each wake-up polls the engine
(which jumps over all steps up to now in one go), hands ready chunks to the waiting
requests, and sets the timer for the next due event. Submits and aborts re-plan at once.
"""

from __future__ import annotations

import asyncio

from gateway.emulator.clock import ScaledClock
from gateway.emulator.engine import ChunkEvent, Engine, EngineRequest, RequestState
from gateway.emulator.metrics import EngineCounts


class EngineDriver:
    def __init__(self, engine: Engine, clock: ScaledClock) -> None:
        self.engine = engine
        self.clock = clock
        self._queues: dict[EngineRequest, asyncio.Queue[ChunkEvent | None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.dead = False

    def submit(self, request: EngineRequest) -> asyncio.Queue[ChunkEvent | None]:
        """The request's chunks as they become ready; ``None`` means the engine died."""
        queue: asyncio.Queue[ChunkEvent | None] = asyncio.Queue()
        if self.dead:
            queue.put_nowait(None)
            return queue
        self._queues[request] = queue
        self.engine.submit(request)
        self.pump()
        return queue

    def kill(self) -> None:
        """The engine died: every request waiting for a chunk gets ``None``, nothing runs on."""
        self.dead = True
        self.close()
        for queue in self._queues.values():
            queue.put_nowait(None)

    def release(self, request: EngineRequest) -> None:
        """The response is over, whatever happened: stop delivering, free the slot."""
        self._queues.pop(request, None)
        if request.state not in (RequestState.FINISHED, RequestState.ABORTED):
            self.engine.abort(request)
            self.pump()

    def counts(self) -> EngineCounts:
        self.pump()
        engine = self.engine
        return EngineCounts(
            running=engine.num_running, waiting=engine.num_waiting, decoding=engine.num_streaming,
            finishing=engine.num_finishing,
        )  # fmt: skip

    def model_to_wall(self, model_seconds: float) -> float:
        return model_seconds * self.clock.time_scale

    def pump(self) -> None:
        """Advance the engine to now, deliver ready chunks, re-arm the timer."""
        if self.dead:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for event in self.engine.poll():
            queue = self._queues.get(event.request)
            if queue is not None:
                queue.put_nowait(event)
        wakeup = self.engine.next_wakeup()
        if wakeup is not None:
            delay = self.clock.wall_delay(wakeup - self.clock.now())
            self._timer = asyncio.get_running_loop().call_later(delay, self.pump)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
