"""The load loops with an in-memory client: no sockets, no timing assertions."""

from __future__ import annotations

import asyncio

from gateway.bench.client import RequestResult, RequestSpec
from gateway.bench.scenarios import run_closed, run_closed_until, run_open
from gateway.bench.workload import Arrival
from gateway.types import SlaClass


class FakeClient:
    """Answers every request after a tick and records how many were in flight at once."""

    def __init__(self, fail_every: int = 0) -> None:
        self.inflight = 0
        self.peak = 0
        self.calls = 0
        self.fail_every = fail_every

    async def speak(self, spec: RequestSpec, phase_start: float) -> RequestResult:
        self.calls += 1
        number = self.calls
        self.inflight += 1
        self.peak = max(self.peak, self.inflight)
        await asyncio.sleep(0.001)
        self.inflight -= 1
        sla = spec.sla_class.value if spec.sla_class else None
        if self.fail_every and number % self.fail_every == 0:
            return RequestResult(sla, len(spec.text), 0.0, 503, "http_503")
        return RequestResult(sla, len(spec.text), 0.0, 200, None, "low_latency", 0.001, 0.002, 48_000, 0.0,
                             chunks=[(0.001, 48_000)])  # fmt: skip

    async def close(self) -> None:
        pass


async def test_closed_loop_caps_concurrency_and_sends_every_request() -> None:
    client = FakeClient(fail_every=5)
    specs = [RequestSpec(f"text {i}") for i in range(20)]
    phase = await run_closed(client, specs, concurrency=4, name="c4")
    assert client.peak == 4
    assert len(phase.results) == 20 == client.calls
    assert sum(r.ok for r in phase.results) == 16
    assert all(r.chunks == [] for r in phase.results)  # raw chunks dropped unless kept


async def test_closed_loop_with_more_callers_than_requests() -> None:
    phase = await run_closed(FakeClient(), [RequestSpec("a")] * 3, concurrency=64, name="c64")
    assert len(phase.results) == 3


async def test_open_loop_sends_each_arrival_with_its_class() -> None:
    arrivals = [Arrival(0.0, SlaClass.LATENCY), Arrival(0.002, SlaClass.THROUGHPUT), Arrival(0.004, None)]
    specs = [RequestSpec("x", a.sla_class) for a in arrivals]
    phase = await run_open(FakeClient(), specs, arrivals, "trace", keep_chunks=True)
    assert [r.sla_class for r in phase.results] == ["latency", "throughput", None]
    assert phase.offered_rate is not None and phase.offered_rate > 0
    assert all(r.chunks for r in phase.results)


async def test_a_sustained_loop_keeps_its_concurrency_until_stopped_and_cuts_nothing() -> None:
    client = FakeClient()
    stop = asyncio.Event()
    specs = [RequestSpec("a"), RequestSpec("b")]
    task = asyncio.create_task(run_closed_until(client, specs, 3, "c3", stop, keep_chunks=True))
    while client.calls < 12:
        await asyncio.sleep(0.001)
    stop.set()
    phase = await task
    assert client.peak == 3
    assert len(phase.results) == client.calls >= 12  # every request sent also finished
    assert {r.input_chars for r in phase.results} == {1}
    assert all(r.chunks for r in phase.results)
    assert phase.started_at > 0 and phase.concurrency == 3
