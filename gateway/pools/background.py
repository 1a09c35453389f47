"""One named background loop: started once, cancelled and awaited on stop.

The health checker, the load reporter, discovery and the gateway's upkeep each run one;
stopping must wait for the loop to end, or a loop still running during shutdown would
touch a closed HTTP client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


class BackgroundLoop:
    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self, loop: Coroutine[Any, Any, None]) -> None:
        self._task = asyncio.get_running_loop().create_task(loop, name=self._name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
