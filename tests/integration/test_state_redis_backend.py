"""The Redis state backend against a real redis-server: atomic writes, the fleet-wide
token bucket, change messages, and what an outage looks like to callers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import StateConfig
from gateway.state.backend import ChangeKind, StoredVoice
from gateway.state.errors import StateUnavailable
from gateway.state.redis_backend import RedisStateBackend
from tests.support.redis_server import RedisServer, running_redis
from tests.support.deadline import within

META = {
    "name": "Narrator", "created_at": 1, "mime_type": "audio/wav", "ext": "wav", "file_size": 4,
    "duration_s": 1.0, "sample_rate": 24000, "channels": 1, "consent": "true",
    "ref_text": None, "speaker_description": None,
}  # fmt: skip


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def backend(server: RedisServer, **settings: Any) -> RedisStateBackend:
    return RedisStateBackend(StateConfig(backend="redis", redis_url=server.url, **settings))


async def test_routing_updates_merge_and_never_lose_a_concurrent_patch(redis_server: RedisServer) -> None:
    first, second = backend(redis_server), backend(redis_server)
    try:
        # Every round of compare-and-set lets at least one through: 8 concurrent patches
        # all land within the 10 attempts each gets.
        await asyncio.gather(
            *(b.update_routing(lambda doc, i=i: {**doc, f"k{i}": i}) for i, b in enumerate([first, second] * 4))
        )
        assert await first.read_routing() == {f"k{i}": i for i in range(8)}
        await first.replace_routing({})
        assert await second.read_routing() == {}
    finally:
        await first.close()
        await second.close()


async def test_voices_are_written_whole_once_and_deleted_by_any_replica(redis_server: RedisServer) -> None:
    first, second = backend(redis_server), backend(redis_server)
    try:
        assert await first.put_voice(StoredVoice(META, b"RIFF"))
        assert not await second.put_voice(StoredVoice({**META, "name": "NARRATOR"}, b"RIFX"))  # same name key
        stored = await second.read_voice("narrator")
        assert stored == StoredVoice(META, b"RIFF")
        assert set(await second.voice_metas()) == {"narrator"}
        assert (await second.delete_voice("NARRATOR")) == META
        assert await first.read_voice("Narrator") is None
        assert await first.delete_voice("Narrator") is None
    finally:
        await first.close()
        await second.close()


async def test_two_owners_voices_of_one_name_are_stored_apart(redis_server: RedisServer) -> None:
    client = backend(redis_server)
    try:
        alices = StoredVoice({**META, "owner": "0123456789ab"}, b"RIFA")
        bobs = StoredVoice({**META, "owner": "ba9876543210", "name": "narrator"}, b"RIFB")
        assert await client.put_voice(StoredVoice(META, b"RIFF"))  # the admin's (no owner: from before owners)
        assert await client.put_voice(alices) and await client.put_voice(bobs)
        assert set(await client.voice_metas()) == {"narrator", "_0123456789ab.narrator", "_ba9876543210.narrator"}
        assert await client.read_voice("_0123456789ab.Narrator") == alices
        assert (await client.delete_voice("_ba9876543210.narrator")) == bobs.meta
        assert await client.read_voice("narrator") == StoredVoice(META, b"RIFF")
    finally:
        await client.close()


SHORT_S, LONG_S = 2.0, 60.0


async def until_holders(client: RedisStateBackend, key: str, expected: list[str]) -> None:
    """Return once ``key``'s unexpired leases are exactly ``expected`` (Redis's clock decides)."""
    while sorted(await client.stream_holders(key)) != sorted(expected):
        await asyncio.sleep(0.05)


async def test_stream_leases_are_one_limit_across_clients_and_expire_unless_renewed(redis_server: RedisServer) -> None:
    first, second = backend(redis_server), backend(redis_server)
    try:
        assert await first.acquire_stream("key", 2, "replica-a:0", 30.0)
        assert await second.acquire_stream("key", 2, "replica-b:0", 30.0)
        assert not await first.acquire_stream("key", 2, "replica-a:1", 30.0)  # the key's 2 are held fleet-wide
        assert await first.acquire_stream("other-key", 2, "replica-a:2", 30.0)
        await second.release_stream("key", "replica-b:0")
        assert sorted(await first.stream_holders("key")) == ["replica-a:0"]
        # A replica that dies holds its lease only until the lease's time is up; one that
        # lives renews it. Both take the same short lease, "alive" first, and "alive" is
        # renewed for far longer right away (the only timing this assumes: one call within
        # SHORT_S). Once "dead" (taken later) has expired, "alive"'s first lease has too:
        # it is still held only through the renewal. Nothing waits a fixed time.
        assert await first.acquire_stream("short", 2, "alive:0", SHORT_S)
        assert await first.acquire_stream("short", 2, "dead:0", SHORT_S)
        await second.renew_streams([("short", "alive:0")], LONG_S)
        await within(SHORT_S + 10, until_holders(first, "short", ["alive:0"]))
        assert await second.acquire_stream("short", 2, "new:0", LONG_S)
        assert not await second.acquire_stream("short", 2, "new:1", LONG_S)
        # Renewing a lease that already expired does not bring it back over the limit.
        await first.renew_streams([("short", "dead:0")], LONG_S)
        assert sorted(await first.stream_holders("short")) == ["alive:0", "new:0"]
    finally:
        await first.close()
        await second.close()


async def test_one_token_bucket_per_key_across_clients(redis_server: RedisServer) -> None:
    clients = [backend(redis_server) for _ in range(3)]
    try:
        # Burst 5 at a negligible refill rate: 5 takes succeed fleet-wide, whoever asks.
        waits = [await clients[i % 3].take_token("key", 0.001, 5) for i in range(9)]
        assert waits[:5] == [0.0] * 5
        assert all(w > 0 for w in waits[5:])
        assert await clients[0].take_token("other-key", 0.001, 5) == 0.0
    finally:
        for client in clients:
            await client.close()


async def test_changes_reach_the_follower_and_outages_are_reported(redis_server: RedisServer) -> None:
    seen: asyncio.Queue[ChangeKind | None] = asyncio.Queue()

    async def on_change(kind: ChangeKind | None) -> None:
        await seen.put(kind)

    follower = backend(redis_server, reconnect_max_backoff_s=0.2)
    writer = backend(redis_server)
    try:
        await follower.start(on_change)
        assert await within(10, seen.get()) is None  # the first full read
        await writer.set_drained("low_latency-0", True)
        assert await within(10, seen.get()) is ChangeKind.DRAINS
        assert await follower.read_drains() == {"low_latency-0"}

        redis_server.kill()
        with pytest.raises(StateUnavailable):
            await writer.set_drained("low_latency-0", False)
        while follower.up:
            await asyncio.sleep(0.02)

        redis_server.start()
        while True:  # reconnected: a full re-read, then up again
            if await within(20, seen.get()) is None and follower.up:
                break
        await writer.set_drained("low_latency-1", True)
        assert await follower.read_drains() == {"low_latency-1"}  # the restarted server lost the rest
    finally:
        await follower.close()
        await writer.close()
