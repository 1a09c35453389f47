"""Noticing that the process behind a worker's address was replaced.

A worker killed and started again between two health probes answers every probe, so
health alone never sees it; but the new process has none of the uploaded voices the
old one held (vllm-omni keeps them per process unless its speaker directory survives),
and every request naming one would fail. What the released worker offers to tell:

* ``process_start_time_seconds`` on ``/metrics``: vLLM serves prometheus_client's
  default registry, whose process collector exports it (Linux, one API server). A new
  value is a new process.
* with several API servers vLLM switches to a multiprocess registry without process
  metrics; then a registered voice missing from ``GET /v1/audio/voices`` tells instead.

The health checker runs ``check`` after each good probe of a routable worker; on a
restart the fleet makes it unroutable until its voices are replayed. The request path
has a last line of defence of its own: a worker answering "Unknown voice" for a voice
the gateway registered is treated the same way (see ``WorkerHealth.request_failed``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import httpx

from gateway.pools.worker import Worker
from gateway.types.labels import RestartReason

log = logging.getLogger("higgs_gateway.restarts")

START_TIME_SERIES = "process_start_time_seconds"
# Start times are whole clock ticks (10 ms); anything closer is the same process.
SAME_START_TOLERANCE_S = 0.05

# base URL -> whether a registered voice is missing there (the voice registry answers).
VoicesMissing = Callable[[str], Awaitable[bool]]


def parse_start_time(text: str) -> float | None:
    """``process_start_time_seconds`` from a Prometheus text exposition, if present."""
    for line in text.splitlines():
        if not line.startswith(START_TIME_SERIES):
            continue
        name, _, value = line.partition(" ")
        if name != START_TIME_SERIES:  # labels are not expected; a longer name is another series
            continue
        try:
            parsed = float(value.split()[0])
        except (ValueError, IndexError):
            return None
        return parsed if math.isfinite(parsed) and parsed > 0 else None
    return None


class RestartDetector:
    def __init__(
        self, client: httpx.AsyncClient, timeout_s: float, voices_missing: VoicesMissing | None = None
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._voices_missing = voices_missing

    async def check(self, worker: Worker, record_only: bool = False) -> RestartReason | None:
        """Why the worker is a new process since the last check, or None. Records its start
        time on the worker; a worker that offers neither signal is never called restarted.
        ``record_only``: a worker being prepared (its voices are replayed anyway)."""
        started = await self._start_time(worker)
        if started is not None:
            previous = worker.record_start_time(started)
            if previous is not None and abs(started - previous) > SAME_START_TOLERANCE_S:
                return RestartReason.START_TIME_CHANGED
            return None
        if self._voices_missing is not None and not record_only:
            try:
                if await self._voices_missing(worker.url):
                    return RestartReason.VOICES_MISSING
            except (httpx.HTTPError, ValueError) as exc:  # unreadable now: the next probe asks again
                log.debug("voice list of %s unreadable: %r", worker.worker_id, exc)
        return None

    async def _start_time(self, worker: Worker) -> float | None:
        try:
            response = await self._client.get(f"{worker.url}/metrics", timeout=self._timeout_s)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        return parse_start_time(response.text)
