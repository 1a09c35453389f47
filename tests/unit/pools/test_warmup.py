"""warm_up against an in-process fake worker (httpx MockTransport, no sockets)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from pydantic import ValidationError

from gateway.config import WarmupConfig
from gateway.pools.warmup import HIGH_THROUGHPUT_SIZES, STAGGER_TOKENS, batch_sizes_for, default_batch_sizes, warm_up
from gateway.types import PoolName
from gateway.types.codec import MIN_AUDIO_TOKENS
from gateway.worker.timing import TimingParams


class FakeWorker:
    def __init__(self, fail_every: int = 0, hang: bool = False) -> None:
        self.inflight = 0
        self.responses = 0
        self.peaks: list[int] = []
        self.bodies: list[dict[str, object]] = []
        self.urls: list[str] = []
        self.fail_every = fail_every
        self.hang = hang

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        self.urls.append(str(request.url))
        self.inflight += 1
        self.peaks.append(self.inflight)
        try:
            if self.hang:
                await asyncio.sleep(3600)
            await asyncio.sleep(0.01)  # long enough for the whole burst to arrive
        finally:
            self.inflight -= 1
        self.responses += 1
        if self.fail_every and self.responses % self.fail_every == 0:
            return httpx.Response(500, json={"error": {"message": "boom", "code": 500}})
        return httpx.Response(200, content=b"\x00\x01" * 480, headers={"content-type": "audio/pcm"})


def client_for(worker: FakeWorker) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(worker))


async def test_each_burst_is_that_many_concurrent_speech_requests() -> None:
    worker = FakeWorker()
    warmup = WarmupConfig(text="hello there", max_new_tokens=12)
    async with client_for(worker) as client:
        report = await warm_up(client, "http://w:1/", "higgs", warmup, [1, 2, 4])
    assert report.ok and report.batch_sizes == [1, 2, 4]
    assert len(worker.bodies) == 7
    assert max(worker.peaks[1:3]) == 2 and max(worker.peaks[3:]) == 4
    assert set(worker.urls) == {"http://w:1/v1/audio/speech"}
    assert worker.bodies[0] == {
        "model": "higgs",
        "input": "hello there",
        "response_format": "pcm",
        "stream_format": "audio",
        "max_new_tokens": 12,
    }
    assert all(burst.audio_bytes == burst.batch_size * 960 for burst in report.bursts)
    assert "ok" in report.summary()


async def test_a_bursts_budgets_are_staggered_so_its_requests_end_one_by_one() -> None:
    # Equal budgets end in one step: the batch jumps from its size to 0 and a high-throughput
    # worker captures none of the sizes below it (traffic then pays those captures).
    worker = FakeWorker()
    async with client_for(worker) as client:
        await warm_up(client, "http://w:1", "higgs", WarmupConfig(max_new_tokens=20), [4])
    budgets = sorted(int(body["max_new_tokens"]) for body in worker.bodies)  # type: ignore[call-overload]
    assert budgets == [20 + STAGGER_TOKENS * i for i in range(4)]


def test_the_default_text_outlasts_the_largest_bursts_longest_budget() -> None:
    # A text that ends before its budget ends every request together at the end of the text.
    longest = WarmupConfig().max_new_tokens + STAGGER_TOKENS * (max(HIGH_THROUGHPUT_SIZES) - 1)
    frames_of_speech = len(WarmupConfig().text) / TimingParams().chars_per_second * TimingParams().frames_per_second
    assert frames_of_speech > longest


async def test_failures_are_reported_not_raised() -> None:
    worker = FakeWorker(fail_every=2)
    async with client_for(worker) as client:
        report = await warm_up(client, "http://w:1", "higgs", WarmupConfig(), [1, 2])
    assert not report.ok
    assert report.bursts[1].failed == 1 and report.bursts[1].succeeded == 1
    assert "HTTP 500" in report.bursts[1].errors[0]
    assert "failed" in report.summary()


async def test_unreachable_worker_fails_every_burst() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        report = await warm_up(client, "http://w:1", "higgs", WarmupConfig(), [1, 2])
    assert not report.ok and [b.failed for b in report.bursts] == [1, 2]
    assert "ConnectError" in report.bursts[0].errors[0]


async def test_timeout_bounds_the_whole_warm_up() -> None:
    async with client_for(FakeWorker(hang=True)) as client:
        report = await warm_up(client, "http://w:1", "higgs", WarmupConfig(timeout_s=0.2), [1, 2])
    assert report.timed_out and not report.ok
    assert "timed out" in report.summary()


@pytest.mark.parametrize(
    ("pool", "max_num_seqs", "sizes"),
    [
        (PoolName.LOW_LATENCY, 16, [1]),
        (PoolName.HIGH_THROUGHPUT, 64, [1, 2, 4, 8, 16, 32, 64]),
        (PoolName.HIGH_THROUGHPUT, 20, [1, 2, 4, 8, 16]),
        (PoolName.HIGH_THROUGHPUT, 128, [1, 2, 4, 8, 16, 32, 64]),
    ],
)
def test_default_batch_sizes(pool: PoolName, max_num_seqs: int, sizes: list[int]) -> None:
    assert default_batch_sizes(pool, max_num_seqs) == sizes


def test_configured_sizes_win() -> None:
    assert batch_sizes_for(PoolName.HIGH_THROUGHPUT, WarmupConfig(batch_sizes=[3, 5]), 64) == [3, 5]
    assert batch_sizes_for(PoolName.HIGH_THROUGHPUT, WarmupConfig(), 8) == [1, 2, 4, 8]


def test_a_warm_up_budget_too_small_for_any_audio_is_refused() -> None:
    # Below MIN_AUDIO_TOKENS a worker answers an empty 200: the warm-up would capture nothing.
    with pytest.raises(ValidationError, match="max_new_tokens"):
        WarmupConfig(max_new_tokens=MIN_AUDIO_TOKENS - 1)
    assert WarmupConfig(max_new_tokens=MIN_AUDIO_TOKENS).max_new_tokens == MIN_AUDIO_TOKENS
