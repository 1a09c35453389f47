"""Load reports: a worker whose /load never counts (no --enable-server-load-tracking) is
detected and read from /metrics instead (vLLM instrumentator/basic.py answers 0 forever)."""

from __future__ import annotations

import httpx
import pytest

from gateway.config import LoadReportConfig
from gateway.pools.load_reports import UNTRACKED_POLLS, LoadReporter, parse_metrics_load
from gateway.pools.worker import LoadSource, Worker
from gateway.types import PoolName, WorkerState

METRICS_BUSY = (
    'vllm_omni:num_requests_running{model_name="m"} 2.0\n'
    'vllm_omni:num_requests_waiting{model_name="m"} 1.0\n'
)


class FakeWorkerHttp:
    def __init__(self, load: int, metrics: str | None) -> None:
        self.load = load
        self.metrics = metrics
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.url.path == "/load":
            return httpx.Response(200, json={"server_load": self.load})
        if self.metrics is None:
            return httpx.Response(404)
        return httpx.Response(200, text=self.metrics)


def reporter(http: FakeWorkerHttp, fallbacks: list[Worker]) -> LoadReporter:
    client = httpx.AsyncClient(transport=httpx.MockTransport(http))
    return LoadReporter(None, client, LoadReportConfig(), clock=lambda: 100.0, on_untracked=fallbacks.append)  # type: ignore[arg-type]


def busy_worker(inflight: int = 3) -> Worker:
    worker = Worker("ll-0", PoolName.LOW_LATENCY, "http://w", slots=16, state=WorkerState.READY)
    for _ in range(inflight):
        worker.lease_taken()
    return worker


async def test_load_stuck_at_zero_while_metrics_show_work_falls_back_to_metrics() -> None:
    http, fallbacks = FakeWorkerHttp(0, METRICS_BUSY), []
    reports, worker = reporter(http, fallbacks), busy_worker()
    assert await reports.poll(worker) == 0  # one poll could be a request still in transit
    assert worker.load_source is LoadSource.LOAD
    assert await reports.poll(worker) == 3
    assert worker.load_source is LoadSource.METRICS and fallbacks == [worker]
    assert worker.describe(100.0, 3.0)["load_source"] == "metrics"
    http.paths.clear()
    assert await reports.poll(worker) == 3
    assert http.paths == ["/metrics"]  # /load is not asked any more


async def test_load_stuck_at_zero_without_metrics_falls_back_after_several_polls() -> None:
    http, fallbacks = FakeWorkerHttp(0, "other_series 1\n"), []
    reports, worker = reporter(http, fallbacks), busy_worker()
    for _ in range(UNTRACKED_POLLS - 1):
        await reports.poll(worker)
        assert worker.load_source is LoadSource.LOAD
    await reports.poll(worker)
    assert worker.load_source is LoadSource.METRICS and len(fallbacks) == 1


@pytest.mark.parametrize(("load", "inflight"), [(0, 0), (3, 3)])
async def test_a_tracking_or_idle_worker_keeps_using_load(load: int, inflight: int) -> None:
    http, fallbacks = FakeWorkerHttp(load, METRICS_BUSY), []
    reports, worker = reporter(http, fallbacks), busy_worker(inflight)
    for _ in range(UNTRACKED_POLLS + 1):
        assert await reports.poll(worker) == load
    assert worker.load_source is LoadSource.LOAD and fallbacks == []


def test_metrics_load_reads_vllm_stage_0_when_omni_series_are_missing() -> None:
    text = (
        'vllm:num_requests_running{model_name="m",replica="0",stage="0"} 4.0\n'
        'vllm:num_requests_running{model_name="m",replica="0",stage="1"} 4.0\n'
        'vllm:num_requests_waiting{model_name="m",replica="0",stage="0"} 2.0\n'
    )
    assert parse_metrics_load(text) == 6
    assert parse_metrics_load(METRICS_BUSY + text) == 3
