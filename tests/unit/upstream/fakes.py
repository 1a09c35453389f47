"""A fake worker transport (as httpx's MockTransport is for httpx) and a fleet to relay over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config import load_config
from gateway.pools.fleet import Fleet
from gateway.pools.specs import load_pool_profiles, pool_specs
from gateway.routing import core as routing_core
from gateway.routing.admission import Admission
from gateway.routing.prior import pool_priors
from gateway.types import PoolName, WorkerState
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.types.decision import Decision
from gateway.types.error_kinds import RetryReason
from gateway.types.observations import StreamObservation
from gateway.upstream.events import AttemptEnded, StreamEnded, UpstreamWorker
from gateway.upstream.errors import UpstreamError

HANG = object()  # a chunk list item: wait forever (until cancelled)


@dataclass
class FakeResponse:
    status: int
    parts: list[Any] = field(default_factory=list)  # bytes, an exception to raise, or HANG
    body: bytes = b""
    closed: bool = False

    async def chunks(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            if part is HANG:
                await asyncio.Event().wait()
            if isinstance(part, BaseException):
                raise part
            yield part

    async def read(self) -> bytes:
        return self.body

    async def close(self) -> None:
        self.closed = True


Handler = Callable[[str, dict[str, Any]], Any]  # -> FakeResponse, an exception, or HANG


class FakeTransport:
    """Answers each worker base URL with the next of its scripted answers."""

    def __init__(self, script: dict[str, list[Any]]) -> None:
        self.script = {url: list(answers) for url, answers in script.items()}
        self.calls: list[str] = []
        self.headers: list[dict[str, str]] = []  # what each call sent besides its JSON body
        self.responses: list[FakeResponse] = []

    async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] = {}) -> FakeResponse:
        base = url.removesuffix("/v1/audio/speech")
        self.calls.append(base)
        self.headers.append(dict(headers))
        answer = self.script[base].pop(0)
        if answer is HANG:
            await asyncio.Event().wait()
        if isinstance(answer, BaseException):
            raise answer
        self.responses.append(answer)
        return answer

    async def close(self) -> None:
        pass


class RecordingLog:
    """The request's watcher as the relay tells it (an ``UpstreamCall`` without the call):
    each attempt's placement, failure and retry, each stream's observation, spelled as the
    tests compare them."""

    def __init__(self, headers: Mapping[str, str] | None = None) -> None:
        self.headers = dict(headers or {})
        self.attempts: list[AttemptEnded] = []
        self.ends: list[StreamEnded] = []

    def headers_for(self, decision: Decision, worker: UpstreamWorker, number: int) -> Mapping[str, str]:
        return self.headers

    def attempt_ended(self, event: AttemptEnded) -> None:
        self.attempts.append(event)

    def stream_ended(self, event: StreamEnded) -> None:
        self.ends.append(event)

    @property
    def decisions(self) -> list[Decision]:
        return [a.decision for a in self.attempts]

    @property
    def retries(self) -> list[RetryReason]:
        return [a.retry_of for a in self.attempts if a.retry_of is not None]

    @property
    def streams(self) -> list[StreamObservation]:
        return [e.observation for e in self.ends]

    @property
    def errors(self) -> list[tuple[PoolName, UpstreamErrorKind]]:
        failed = [(a.worker.pool, a.failure.kind) for a in self.attempts if a.failure is not None]
        return failed + [(e.worker.pool, e.cut) for e in self.ends if e.cut is not None]

    @property
    def error_kinds(self) -> list[tuple[str, str]]:
        return [(pool.value, kind.value) for pool, kind in self.errors]


LL_URL = "http://ll-0.test"
LL2_URL = "http://ll-1.test"
HT_URL = "http://ht-0.test"


def ready_fleet(
    tmp_path: Path, *, slots: int | None = None, upstream: dict[str, Any] | None = None, routing: dict[str, Any] | None = None
) -> tuple[Fleet, Admission]:
    """Two low-latency workers and one high-throughput worker, all READY; admission over them."""
    overrides: dict[str, Any] = {"data_dir": str(tmp_path), "upstream": upstream or {}, "routing": routing or {}}
    if slots is not None:
        overrides["pools"] = {
            "low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "slots_per_worker": slots},
            "high_throughput": {"profile": "higgs_multimodal_qwen3_high_throughput.yaml", "slots_per_worker": slots},
        }
    config = load_config(overrides=overrides)
    fleet = Fleet.build(config, pool_specs(config, load_pool_profiles(config)), clock=lambda: 100.0)
    for pool, worker_id, url in (
        (PoolName.LOW_LATENCY, "ll-0", LL_URL),
        (PoolName.LOW_LATENCY, "ll-1", LL2_URL),
        (PoolName.HIGH_THROUGHPUT, "ht-0", HT_URL),
    ):
        fleet.members.add_worker(pool, worker_id, url)
        worker = fleet.members.get(worker_id)
        assert worker is not None
        worker.set_state(WorkerState.READY, 100.0)
    # Built as the gateway builds it: the latency reserve follows the `latency` traffic seen.
    admission = routing_core.build(
        config.routing,
        config.admission,
        fleet.view.snapshot,
        fleet.leases.lease,
        lambda: 100.0,
        priors=pool_priors(load_pool_profiles(config)),
        any_routable=fleet.view.any_routable,
    ).admission
    fleet.events.on_slot_freed(admission.capacity_changed)
    fleet.events.on_capacity_change(admission.capacity_changed)
    return fleet, admission


def cut(detail: str = "connection reset") -> UpstreamError:
    return UpstreamError(UpstreamErrorKind.STREAM_ERROR, detail)


class FaultyTransport:
    """Answers the n-th call with the n-th answer, whichever worker is asked, and counts
    every await the relay makes on it (``steps``: post, read, chunk, close, in order).
    At step ``fault_at`` it raises ``fault`` there, or, with ``fault=HANG``, waits there
    until the test cancels the request: a failure at any await before the first byte."""

    def __init__(self, answers: list[FakeResponse], fault_at: int | None = None, fault: Any = None) -> None:
        self.answers = list(answers)
        self.fault_at = fault_at
        self.fault = fault
        self.steps: list[str] = []
        self.reached = asyncio.Event()  # the fault's step was reached
        self.responses: list[FakeResponse] = []

    async def step(self, name: str) -> None:
        index = len(self.steps)
        self.steps.append(name)
        if index == self.fault_at:
            self.reached.set()
            if self.fault is HANG:
                await asyncio.Event().wait()
            raise self.fault
        await asyncio.sleep(0)  # a real suspension, as a socket's would be

    async def post_stream(self, url: str, body: dict[str, Any], headers: Mapping[str, str] = {}) -> _FaultyResponse:
        await self.step("post")
        answer = self.answers.pop(0)
        self.responses.append(answer)
        return _FaultyResponse(self, answer)

    async def close(self) -> None:
        pass


class _FaultyResponse:
    def __init__(self, transport: FaultyTransport, answer: FakeResponse) -> None:
        self._transport = transport
        self._answer = answer
        self.status = answer.status

    async def chunks(self) -> AsyncIterator[bytes]:
        for part in self._answer.parts:
            await self._transport.step("chunk")
            yield part

    async def read(self) -> bytes:
        await self._transport.step("read")
        return self._answer.body

    async def close(self) -> None:
        self._answer.closed = True
        await self._transport.step("close")


def failing_then_serving(audio: bytes) -> list[FakeResponse]:
    """A 500 (its body read, then dropped for a retry), then an empty chunk and audio: every
    kind of await the relay makes before a first byte."""
    return [FakeResponse(500, body=b'{"error": {"message": "boom"}}'), FakeResponse(200, [b"", audio])]


# The awaits ``failing_then_serving`` makes before the first byte, in order.
AWAITS_BEFORE_AUDIO = ("post", "read", "close", "post", "chunk", "chunk")
