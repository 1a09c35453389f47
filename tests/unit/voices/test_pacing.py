"""Uploads to a streaming worker go one at a time, spaced; to an idle one at once."""

from __future__ import annotations

import asyncio

from gateway.voices.pacing import UploadPacer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


async def test_uploads_to_a_streaming_worker_are_serial_and_spaced() -> None:
    clock = Clock()
    pacer = UploadPacer(lambda url: 3, 0.2, clock, clock.sleep)
    order: list[str] = []

    async def upload(name: str) -> None:
        async with pacer.turn("http://w1"):
            order.append(f"{name}+")
            await asyncio.sleep(0)  # another upload may start here unless serialised
            clock.now += 0.05  # the worker takes 50 ms to save the clip
            order.append(f"{name}-")

    await asyncio.gather(*(upload(n) for n in "abc"))
    assert order == ["a+", "a-", "b+", "b-", "c+", "c-"]
    assert clock.slept == [0.2, 0.2], "each waits spacing_s after the previous one ended"


async def test_an_idle_worker_gets_its_uploads_at_once() -> None:
    clock = Clock()
    pacer = UploadPacer(lambda url: 0, 0.2, clock, clock.sleep)
    running = 0
    peak = 0

    async def upload() -> None:
        nonlocal running, peak
        async with pacer.turn("http://w1"):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0)
            running -= 1

    await asyncio.gather(*(upload() for _ in range(4)))
    assert peak == 4 and clock.slept == []


async def test_workers_are_paced_apart_from_each_other() -> None:
    clock = Clock()
    pacer = UploadPacer(lambda url: 1, 0.2, clock, clock.sleep)
    for url in ("http://w1", "http://w2"):
        async with pacer.turn(url):
            pass
    assert clock.slept == []
