"""SLA classes under load, and operator drain: one low-latency worker (capped at 4) and one
high-throughput worker limited to 8 slots so a flood of ``throughput`` requests saturates it.

``latency`` requests keep getting low-latency slots while the flood runs (the reserve, pinned),
spill to high-throughput once low-latency is full and their queue budget is spent, and a
drained worker finishes what it carries while new requests go elsewhere.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest

from tests.integration.conftest import (
    Routed,
    speak,
    ADMIN,
    LONG_TEXT,
    SHORT_TEXT,
    LoadSampler,
    pools,
    set_faults,
    wait_idle,
    worker_entry,
    worker_load,
)
from tests.support.stack import Stack, running_stack

TIME_SCALE = 0.1
LL_SLOTS = 4  # operator caps: the adaptive policy never goes past them
HT_SLOTS = 8
MEDIUM_TEXT = f"{SHORT_TEXT} {SHORT_TEXT}"
VERY_LONG_TEXT = " ".join([SHORT_TEXT] * 18)  # ~80 s of audio: holds a slot for seconds here


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    extra = {
        "pools": {"low_latency": {"slots_per_worker": LL_SLOTS}, "high_throughput": {"slots_per_worker": HT_SLOTS}},
        # Far longer than any request here runs: see the spill test.
        "admission": {"max_wait_s": {"latency": 30}},
        # The flood comes before any `latency` request: pinned, the reserve holds from the
        # start (adaptive, it would only follow the `latency` traffic once it came).
        "routing": {"thresholds": {"adaptive_latency_reserve": False}},
    }
    with running_stack(tmp_path_factory.mktemp("classes"), 1, 1, time_scale=TIME_SCALE, extra=extra) as running:
        yield running


def urls(stack: Stack) -> list[str]:
    return [stack.workers["low_latency"][0].url, stack.workers["high_throughput"][0].url]


async def wait_for(predicate: Callable[[], bool], timeout: float, message: str) -> None:
    """Poll a blocking ``predicate`` off the event loop until it holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if await asyncio.to_thread(predicate):
            return
        await asyncio.sleep(0.03)
    raise AssertionError(f"timed out after {timeout}s: {message}")


@asynccontextmanager
async def background(client: httpx.AsyncClient, url: str, text: str, sla_class: str, count: int) -> AsyncIterator[list[asyncio.Task[Routed]]]:
    """``count`` requests running in the background; cancelled (client gone) if still running at exit."""
    tasks = [asyncio.create_task(speak(client, url, text, sla_class)) for _ in range(count)]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_latency_keeps_low_latency_slots_during_a_throughput_flood(stack: Stack) -> None:
    ll_url = stack.workers["low_latency"][0].url
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as client:
        with LoadSampler(ll_url, stack.url) as sampler:
            flood = [asyncio.create_task(speak(client, stack.url, LONG_TEXT, "throughput")) for _ in range(20)]

            def saturated() -> bool:
                status = httpx.get(f"{stack.url}/admin/pools", headers=ADMIN, timeout=10).json()
                return (
                    status["pools"]["high_throughput"]["inflight"] == HT_SLOTS
                    and status["queue_depths"]["throughput"] > 0
                )

            await wait_for(saturated, 30, "high-throughput full and throughput requests queued")
            # Throughput borrowed low-latency slots only down to the reserve (2 per worker).
            assert pools(stack.url)["low_latency"]["inflight"] <= 2
            latency = [await speak(client, stack.url, MEDIUM_TEXT, "latency") for _ in range(4)]
            still_flooding = pools(stack.url)["high_throughput"]["inflight"] > 0
            flooded = await asyncio.gather(*flood)
    assert still_flooding, "the flood ended before the latency requests did: lengthen it"
    for routed in latency:
        assert routed.status == 200 and routed.audio_bytes > 0
        assert (routed.pool, routed.reason) == ("low_latency", "fastest_ttfp"), routed
    assert all(r.status == 200 for r in flooded), [r.status for r in flooded]
    where = Counter((r.pool, r.reason) for r in flooded)
    # Queued past admission.promote_after_s (0.5 s), a throughput request is placed as
    # balanced (fastest_finish): still never into the reserve.
    assert where[("high_throughput", "most_throughput")] + where[("high_throughput", "fastest_finish")] >= 12, dict(where)
    assert set(where) <= {(pool, reason) for pool in ("high_throughput", "low_latency") for reason in ("most_throughput", "fastest_finish")}, dict(where)
    assert sampler.worker_max <= 4, f"low-latency worker carried {sampler.worker_max}"
    await asyncio.to_thread(wait_idle, stack.url, urls(stack))


async def test_full_low_latency_makes_latency_spill_after_its_budget(stack: Stack) -> None:
    """While four long requests fill low-latency, every new ``latency`` request must spill
    to high-throughput once its queue budget (150 ms, or half its TTFP budget) is spent.

    ``latency`` may wait 30 s here, far longer than the fillers hold their slots: a request
    that missed its spill moment waits for a low-latency slot and comes back ``fastest_ttfp``.
    Each request is a fresh chance to miss it, hence several in a row.
    """
    ll_url = stack.workers["low_latency"][0].url
    spills: list[Routed] = []
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=16)) as client:
        with LoadSampler(ll_url, stack.url) as sampler:
            # The worker holds the fillers 2 s before streaming ~80 s of audio: they keep
            # every low-latency slot for several seconds, whatever the box's speed.
            set_faults(ll_url, hang_seconds=2.0)
            try:
                async with background(client, stack.url, VERY_LONG_TEXT, "latency", 4) as fillers:
                    await wait_for(lambda: worker_load(ll_url) == 4, 30, "four latency requests on the low-latency worker")
                    set_faults(ll_url, clear=True)
                    await spill_attempts(client, stack, fillers, spills)
            finally:
                set_faults(ll_url, clear=True)
    assert len(spills) >= 4, f"the fillers ended too soon to test spilling: {spills}"
    assert sampler.worker_max <= 4
    await asyncio.to_thread(wait_idle, stack.url, urls(stack))


async def spill_attempts(
    client: httpx.AsyncClient, stack: Stack, fillers: list[asyncio.Task[Routed]], spills: list[Routed]
) -> None:
    for attempt in range(8):
        if any(task.done() for task in fillers) or pools(stack.url)["low_latency"]["inflight"] != 4:
            return
        # Alternate the default budget and a TTFP budget (half of 100 ms may queue).
        headers = {"x-sla-ttfp-ms": "100"} if attempt % 2 else None
        routed = await speak(client, stack.url, SHORT_TEXT, "latency", headers)
        if routed.reason == "fastest_ttfp" and any(task.done() for task in fillers):
            return  # a filler ended while this one queued: taking its slot was right
        spills.append(routed)
        assert routed.status == 200 and routed.audio_bytes > 0, routed
        assert (routed.pool, routed.reason) == ("high_throughput", "spill_ll_full"), (
            f"latency request {attempt} (headers {headers}) did not spill after its queue budget "
            f"while low-latency was full: {routed}. If it came back fastest_ttfp it waited for "
            "the fillers to end: admission missed the waiter's spill time."
        )


async def test_drain_finishes_in_flight_and_routes_nothing_new(stack: Stack) -> None:
    ll_url = stack.workers["low_latency"][0].url
    ll_id = worker_entry(stack.url, ll_url)["id"]
    async with httpx.AsyncClient(timeout=120) as client:
        # `latency` may fill low-latency to its cap (balanced leaves the reserve free).
        in_flight = [asyncio.create_task(speak(client, stack.url, LONG_TEXT, "latency")) for _ in range(3)]
        await wait_for(lambda: worker_load(ll_url) == 3, 30, "three requests on the low-latency worker")
        drained = httpx.post(f"{stack.url}/admin/workers/{ll_id}/drain", headers=ADMIN, timeout=10)
        assert drained.status_code == 200, drained.text
        assert drained.json()["drained"] is True and drained.json()["inflight"] == 3, drained.json()
        assert not worker_entry(stack.url, ll_url)["routable"]

        during = [await speak(client, stack.url, LONG_TEXT, sla) for sla in ("balanced", "latency")]
        finished = await asyncio.gather(*in_flight)
    for routed in during:
        assert routed.status == 200
        assert (routed.pool, routed.reason) == ("high_throughput", "no_ll_workers"), routed
    expected_bytes = during[0].audio_bytes
    for routed in finished:
        assert routed.status == 200 and routed.pool == "low_latency"
        assert routed.audio_bytes == expected_bytes, "in-flight requests ran to the end of their clip"
    assert worker_load(ll_url) == 0 and pools(stack.url)["low_latency"]["inflight"] == 0

    undrained = httpx.post(f"{stack.url}/admin/workers/{ll_id}/undrain", headers=ADMIN, timeout=10)
    assert undrained.status_code == 200 and undrained.json()["drained"] is False, undrained.text
    # A `latency` request: its pool does not depend on what the curves learned meanwhile
    # (a `balanced` one may rightly pick high-throughput if low-latency measured slow here).
    async with httpx.AsyncClient(timeout=120) as client:
        after = await speak(client, stack.url, SHORT_TEXT, "latency")
    assert (after.pool, after.reason) == ("low_latency", "fastest_ttfp"), after
    unknown = httpx.post(f"{stack.url}/admin/workers/no-such-worker/drain", headers=ADMIN, timeout=10)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "worker_id", unknown.text
