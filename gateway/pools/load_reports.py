"""The workers' own view of their load, for what other gateway replicas put on them.

Each worker is polled about once a second: ``GET /load`` (exact in-flight HTTP requests
with ``--enable-server-load-tracking``) and, when that is missing, ``GET /metrics``
(``vllm_omni:num_requests_running`` + ``vllm_omni:num_requests_waiting``, else vLLM's
Stage 0 ``vllm:num_requests_*``). A report is a cross-check with a staleness bound, never
the only signal: routing uses the larger of it and our exact local count, and falls back
to the local count when it is stale (fail open).

A worker started without ``--enable-server-load-tracking`` still answers ``/load``, with
``{"server_load": 0}`` forever (vLLM ``instrumentator/basic.py: get_server_load_metrics``).
That reads as "idle", so it is detected: ``/load`` at 0 while requests of ours are in flight
there, confirmed by ``/metrics`` showing work or seen on several polls in a row, switches
that worker to ``/metrics`` for good (logged, counted, shown as ``load_source`` in
``/admin/pools``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx

from gateway.config import LoadReportConfig
from gateway.pools.background import BackgroundLoop
from gateway.pools.view import FleetView
from gateway.pools.worker import LoadSource, Worker
from gateway.types import WorkerState

log = logging.getLogger("higgs_gateway.load_reports")

# How long after our lease ends a worker may still count the request (it releases after
# its last byte is written, and a busy worker gets there late).
RELEASE_LAG_S = 0.1
_REPORTED_SERIES = ("vllm_omni:num_requests_running", "vllm_omni:num_requests_waiting")
# vLLM's per-stage gauges; only Stage 0 (the talker) counts requests once, as admitted.
_STAGE_SERIES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
_STAGE_0 = 'stage="0"'
# /load at 0 with our requests in flight this many polls in a row: no load tracking. With
# /metrics confirming the worker is busy, fewer are needed (one could be a request in transit).
UNTRACKED_POLLS = 3
UNTRACKED_POLLS_CONFIRMED = 2


def parse_metrics_load(text: str) -> int | None:
    """Running + waiting requests: the ``vllm_omni:`` gauges summed over all label sets,
    else vLLM's Stage 0 ``vllm:`` gauges; None if neither is there."""
    omni = _sum_series(text, _REPORTED_SERIES)
    return omni if omni is not None else _sum_series(text, _STAGE_SERIES, _STAGE_0)


def _sum_series(text: str, names: tuple[str, ...], label: str | None = None) -> int | None:
    total = 0.0
    seen = False
    for line in text.splitlines():
        if not line.startswith(names):
            continue
        name_end = line.find("{")
        name = line[: name_end if name_end >= 0 else line.find(" ")]
        if name not in names or (label is not None and label not in line):
            continue
        try:
            total += float(line.rsplit(" ", 1)[-1])
        except ValueError:
            continue
        seen = True
    return int(total) if seen else None


class LoadReporter:
    def __init__(
        self,
        fleet: FleetView,
        client: httpx.AsyncClient,
        config: LoadReportConfig,
        clock: Callable[[], float] = time.monotonic,
        on_untracked: Callable[[Worker], None] | None = None,
    ) -> None:
        self._fleet = fleet
        self._client = client
        self._config = config
        self._clock = clock
        self._on_untracked = on_untracked  # the recorder counts fallbacks
        self._idle_while_busy: dict[str, int] = {}  # worker id -> polls in a row
        self._loop = BackgroundLoop("load-reporter")
        self._stale_logged: set[str] = set()

    def start(self) -> None:
        if self._config.enabled:
            self._loop.start(self._run())

    async def stop(self) -> None:
        await self._loop.stop()

    async def _run(self) -> None:
        while True:
            workers = [w for w in self._fleet.workers if w.state is WorkerState.READY]
            await asyncio.gather(*(self.poll(w) for w in workers), return_exceptions=True)
            self._note_stale()
            await asyncio.sleep(self._config.interval_s)

    async def poll(self, worker: Worker) -> int | None:
        # A worker stops counting a request a little after its last byte reached us, and
        # counts at some instant during the poll: requests of ours that ended just before
        # or during the poll may still be in its report. Credit them to us, or they pass
        # for another replica's load (phantoms that tip `balanced` over its threshold at
        # concurrency 3-4, where hysteresis then keeps it on high-throughput).
        ours_before = worker.inflight + worker.releases_since(self._clock() - RELEASE_LAG_S)
        busy_before = worker.inflight > 0
        load = await self._read_load(worker) if worker.load_source == LoadSource.LOAD else None
        if load == 0 and busy_before and worker.inflight > 0:
            metrics_load = await self._read_metrics(worker)
            if self._looks_untracked(worker, metrics_load):
                self._fall_back_to_metrics(worker)
                load = metrics_load
        elif load is not None:
            self._idle_while_busy.pop(worker.worker_id, None)
        if load is None:
            load = await self._read_metrics(worker)
        if load is not None:
            worker.record_report(load, self._clock(), ours=max(ours_before, worker.inflight))
            self._stale_logged.discard(worker.worker_id)
        return load

    def _looks_untracked(self, worker: Worker, metrics_load: int | None) -> bool:
        """One more poll where /load said 0 while our requests were in flight there."""
        polls = self._idle_while_busy.get(worker.worker_id, 0) + 1
        self._idle_while_busy[worker.worker_id] = polls
        confirmed = metrics_load is not None and metrics_load > 0
        return polls >= (UNTRACKED_POLLS_CONFIRMED if confirmed else UNTRACKED_POLLS)

    def _fall_back_to_metrics(self, worker: Worker) -> None:
        worker.read_load_from(LoadSource.METRICS)
        self._idle_while_busy.pop(worker.worker_id, None)
        log.warning(
            "worker %s: /load stays 0 with requests in flight (started without "
            "--enable-server-load-tracking?); reading its load from /metrics instead",
            worker.worker_id,
            extra={"worker": worker.worker_id},
        )
        if self._on_untracked is not None:
            self._on_untracked(worker)

    async def _read_load(self, worker: Worker) -> int | None:
        try:
            response = await self._client.get(f"{worker.url}/load", timeout=self._config.interval_s)
            if response.status_code != 200:
                return None
            return int(response.json()["server_load"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    async def _read_metrics(self, worker: Worker) -> int | None:
        try:
            response = await self._client.get(f"{worker.url}/metrics", timeout=self._config.interval_s)
            return parse_metrics_load(response.text) if response.status_code == 200 else None
        except httpx.HTTPError:
            return None

    def _note_stale(self) -> None:
        now = self._clock()
        for worker in self._fleet.workers:
            if not worker.routable or worker.fresh_report(now, self._config.stale_after_s) is not None:
                continue
            if worker.worker_id in self._stale_logged:
                continue
            self._stale_logged.add(worker.worker_id)
            log.warning(
                "worker %s: no fresh load report; routing on local counts only", worker.worker_id,
                extra={"worker": worker.worker_id},
            )
