"""Has a started worker come up? The supervisor only needs this to enforce start_timeout_s.

The fleet's health prober decides routability. The supervisor can reuse what the prober
saw (``is_ready(worker_id)``, no second prober hitting every worker) or, standing alone,
ask ``GET /health`` itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import httpx

# The gateway's answer for one worker id: True once it answered /health with 200.
IsReady = Callable[[str], "bool | Awaitable[bool]"]


async def ask(is_ready: IsReady, worker_id: str) -> bool:
    result = is_ready(worker_id)
    if inspect.isawaitable(result):
        result = await result
    return bool(result)


class HealthProbe:
    """``GET {url}/health`` == 200; connection refused is the normal "still starting" answer."""

    def __init__(self, timeout_s: float = 2.0) -> None:
        # trust_env=False: a proxy from the environment must never sit between us and a
        # worker on the same host.
        self._client = httpx.AsyncClient(timeout=timeout_s, trust_env=False)

    async def __call__(self, url: str) -> bool:
        try:
            response = await self._client.get(f"{url}/health")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def aclose(self) -> None:
        await self._client.aclose()
