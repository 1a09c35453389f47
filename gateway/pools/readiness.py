"""Before a worker becomes routable: its preparation (voices replayed, warm-up) runs here,
one task per worker, and only a finished preparation makes it ``READY``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.pools.events import FleetEvents
from gateway.pools.worker import Worker
from gateway.types import WorkerState

log = logging.getLogger("higgs_gateway.fleet")

# Voices replayed, warm-up done (``preparation.WorkerPreparation.prepare``). Raises to stay unready.
PrepareHook = Callable[[Worker], Awaitable[None]]


class Readiness:
    def __init__(self, events: FleetEvents, clock: Callable[[], float]) -> None:
        self._events = events
        self._clock = clock
        self._prepare: PrepareHook | None = None
        self._preparing: dict[str, asyncio.Task[None]] = {}

    def set_hook(self, hook: PrepareHook) -> None:
        """Set once at wiring time: preparing needs the voice registry, which needs the members."""
        self._prepare = hook

    def start(self, worker: Worker) -> None:
        if worker.worker_id in self._preparing:
            return
        task = asyncio.get_running_loop().create_task(self._prepare_then_ready(worker))
        self._preparing[worker.worker_id] = task
        task.add_done_callback(lambda _t, wid=worker.worker_id: self._preparing.pop(wid, None))

    def cancel(self, worker_id: str) -> None:
        task = self._preparing.pop(worker_id, None)
        if task is not None:
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._preparing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _prepare_then_ready(self, worker: Worker) -> None:
        try:
            if self._prepare is not None:
                await self._prepare(worker)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # stays unready; the next good probe tries again
            worker.note_error(f"prepare: {exc}")
            log.warning("worker %s not ready: %s", worker.worker_id, exc, extra={"worker": worker.worker_id})
            return
        # A worker removed or replaced while preparing is STOPPED: it stays so.
        if worker.state in (WorkerState.STARTING, WorkerState.EJECTED):
            worker.mark_ready(self._clock(), "healthy and prepared")
            self._events.capacity_changed()
