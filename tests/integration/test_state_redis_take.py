"""The take script on a real Redis: a lease is written (and announced) only when the take
stands, so a refused one is never counted by any replica."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.config import StateConfig
from gateway.state.inflight import Take
from gateway.state.inflight_redis import RedisInflightStore
from tests.support.redis_server import running_redis


def take(counted: frozenset[str] = frozenset(), ours: int = 0, cap: int = 2) -> Take:
    return Take("a:", counted, ours, cap)


async def test_a_take_is_written_only_when_it_stands(tmp_path: Path) -> None:
    with running_redis(tmp_path / "redis") as redis:
        store = RedisInflightStore(StateConfig(backend="redis", redis_url=redis.url, key_prefix="take-it:"))
        announced: list[tuple[str, str, str]] = []
        subscribed = asyncio.Event()

        async def on_subscribed() -> None:
            subscribed.set()

        follower = asyncio.create_task(store.follow(lambda *delta: announced.append(delta), on_subscribed))
        try:
            await asyncio.wait_for(subscribed.wait(), 10)
            assert await store.reserve("ll", "b:1", 30, Take("b:", frozenset(), 0, 2)) == (True, [])
            # Another replica's lease the decision did not count: stale, not written.
            assert await store.reserve("ll", "a:1", 30, take()) == (False, ["b:1"])
            # Counted, under the cap with this replica's own other lease: written.
            assert await store.reserve("ll", "a:1", 30, take(frozenset({"b:1"}))) == (True, ["b:1"])
            # b's and a's own fill the cap of 2: refused.
            stands, before = await store.reserve("ll", "a:2", 30, take(frozenset({"b:1"}), ours=1))
            assert not stands and sorted(before) == ["a:1", "b:1"]
            # Uncapped (cap 0): only staleness refuses.
            assert (await store.reserve("ll", "a:3", 30, take(frozenset({"b:1"}), ours=1, cap=0)))[0]
            await asyncio.sleep(0.2)
            assert [lease for op, _, lease in announced if op == "+"] == ["b:1", "a:1", "a:3"]
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            await store.close()
