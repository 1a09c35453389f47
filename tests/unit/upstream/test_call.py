"""One upstream call from admission to release, over the fake transport: whatever fails
between admission and the first byte (the trace's hooks, the caller's ``on_placed``, a
cancellation while queued) leaves no slot held; ``close`` is the one, idempotent release."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gateway.config import UpstreamConfig
from gateway.types import SlaClass
from gateway.types.decision import Decision
from gateway.types.observations import StreamOutcome
from gateway.types.view import RequestInfo
from gateway.upstream.call import Upstream
from gateway.upstream.events import AttemptEnded, HealthReports, StreamEnded, UpstreamWorker
from gateway.upstream.relay import Relay
from tests.unit.upstream.fakes import HANG, HT_URL, LL2_URL, LL_URL, FakeResponse, FakeTransport, ready_fleet

AUDIO = b"\x01\x00" * 100
PAYLOAD: dict[str, Any] = {"model": "m", "input": "hi"}
INFO = RequestInfo(SlaClass.BALANCED, None, 2)


def upstream_over(tmp_path: Path, script: dict[str, list[Any]], slots: int | None = None) -> tuple[Upstream, Any, FakeTransport]:
    fleet, admission = ready_fleet(tmp_path, slots=slots)
    transport = FakeTransport(script)
    relay = Relay(transport, (HealthReports(fleet.health),), admission, UpstreamConfig())
    return Upstream(admission, relay), fleet, transport


def held(fleet: Any) -> int:
    return sum(w.inflight for w in fleet.view.workers)


def serving() -> dict[str, list[Any]]:
    return {url: [FakeResponse(200, [AUDIO])] for url in (LL_URL, LL2_URL, HT_URL)}


class Injected(Exception):
    pass


class FailingTrace:
    """A request's spans that fail at one of their hooks (a bug in tracing must not leak a slot)."""

    def __init__(self, at: str) -> None:
        self.at = at

    def _maybe(self, name: str) -> None:
        if name == self.at:
            raise Injected(name)

    def admission_started(self) -> None:
        self._maybe("admission_started")

    def routed(self, decision: Decision, retry: bool = False) -> None:
        self._maybe("routed")

    def attempt(self, worker: UpstreamWorker, number: int) -> Mapping[str, str]:
        self._maybe("attempt")
        return {}

    def attempt_ended(self, event: AttemptEnded) -> None:
        self._maybe("attempt_ended")

    def stream_ended(self, event: StreamEnded) -> None:
        self._maybe("stream_ended")


@pytest.mark.parametrize("hook", ["admission_started", "routed", "attempt", "attempt_ended"])
async def test_a_trace_hook_failing_before_the_first_byte_leaves_no_slot_held(tmp_path: Path, hook: str) -> None:
    upstream, fleet, transport = upstream_over(tmp_path, serving())
    call = upstream.call(INFO, PAYLOAD, {}, FailingTrace(hook))
    with pytest.raises(Injected):
        await call.open()
    assert held(fleet) == 0
    assert all(response.closed for response in transport.responses)
    await call.close(StreamOutcome.ERROR)  # again: nothing left, nothing raised
    assert held(fleet) == 0


async def test_the_callers_on_placed_failing_leaves_no_slot_held(tmp_path: Path) -> None:
    upstream, fleet, transport = upstream_over(tmp_path, serving())
    call = upstream.call(INFO, PAYLOAD, {})

    def placed(decision: Decision) -> None:
        assert held(fleet) == 1  # the slot is held from admission on
        raise Injected("on_placed")

    with pytest.raises(Injected):
        await call.open(placed)
    assert held(fleet) == 0 and transport.calls == []  # never sent


async def test_a_call_cancelled_while_queued_in_admission_holds_nothing(tmp_path: Path) -> None:
    upstream, fleet, _ = upstream_over(tmp_path, {url: [FakeResponse(200, [HANG])] * 4 for url in (LL_URL, LL2_URL, HT_URL)}, slots=1)
    opening: list[asyncio.Task[None]] = []
    while not any(upstream.admission.queue_depths().values()):  # fill the fleet until one waits
        assert len(opening) < 10, "admission never queued"
        opening.append(asyncio.create_task(upstream.call(INFO, PAYLOAD, {}).open()))
        for _ in range(5):
            await asyncio.sleep(0)
    queued, waiting = opening[-1], held(fleet)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert not any(upstream.admission.queue_depths().values()) and held(fleet) == waiting
    for task in opening:
        task.cancel()
    await asyncio.gather(*opening, return_exceptions=True)
    assert held(fleet) == 0


async def test_a_served_call_holds_one_slot_until_its_one_close(tmp_path: Path) -> None:
    upstream, fleet, transport = upstream_over(tmp_path, serving())
    call = upstream.call(INFO, PAYLOAD, {"x-request-id": "req-1"})
    await call.open()
    assert call.first_chunk == AUDIO and call.attempts == 1 and call.retries == 0
    assert call.decision is not None and call.waited_s is not None
    assert held(fleet) == 1 and transport.headers == [{"x-request-id": "req-1"}]
    assert call.rest is not None
    async for chunk in call.rest:
        call.count(len(chunk))
    await call.close(StreamOutcome.COMPLETED)
    await call.close(StreamOutcome.COMPLETED)
    assert held(fleet) == 0 and call.received_bytes == len(AUDIO)


@pytest.mark.parametrize("script", ["served", "retried"])
async def test_a_closed_call_leaves_no_reference_cycle(tmp_path: Path, script: str) -> None:
    """Refcounting alone frees a finished call and its streams: objects left to the cyclic
    collector pile up per request and its collections stall the event loop under load."""
    upstream, fleet, transport = upstream_over(tmp_path, {url: [FakeResponse(200, [AUDIO])] * 2 for url in serving()})

    async def one_request() -> int:
        call = upstream.call(INFO, PAYLOAD, {})
        await call.open()
        assert call.rest is not None
        async for chunk in call.rest:
            call.count(len(chunk))
        await call.close(StreamOutcome.COMPLETED)
        return call.attempts

    await one_request()  # warm: lazily built state is not the request's
    if script == "retried":  # ties rotate: the other low-latency worker is asked next, busy
        busy = LL2_URL if transport.calls[0] == LL_URL else LL_URL
        transport.script[busy].insert(0, FakeResponse(503, [], b"busy"))
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        attempts = await one_request()
        gc.collect()
        left = {type(obj).__name__ for obj in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not left & {"UpstreamCall", "OpenStream", "Lease", "PaceMeter"}, left
    assert attempts == (2 if script == "retried" else 1) and held(fleet) == 0
