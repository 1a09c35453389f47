"""An asyncio event loop whose clock is virtual: idle time passes instantly.

Everything the simulated fleet does (admission's timers, the engines' wake-ups, the load
generator's arrivals) is ordinary asyncio code: ``call_later``, ``asyncio.sleep``,
``asyncio.wait(timeout=...)``. This loop runs it unchanged; when nothing is ready, instead of
blocking in ``select`` until the next timer, it moves its clock to that timer. So the real
admission and policy code run as they do in production, only without waiting for time.

No sockets, threads or subprocesses may be used on it (nothing would ever wake it).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _TimeSkippingSelector(selectors.DefaultSelector):
    """``select(timeout)`` advances the virtual clock by ``timeout`` instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            # Nothing scheduled and nothing ready: a real loop would block forever.
            raise RuntimeError("simulation deadlock: every task waits and no timer is pending")
        # Poll the loop's own wake-up pipe without blocking, then let virtual time pass.
        ready = super().select(0)
        if not ready and timeout > 0:
            self.now += timeout
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._skipping = _TimeSkippingSelector()
        super().__init__(self._skipping)

    def time(self) -> float:
        return self._skipping.now


def run_virtual(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a fresh virtual-time loop."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(coroutine)
