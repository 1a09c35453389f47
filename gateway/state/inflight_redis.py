"""The fleet's in-flight leases in Redis (``state.backend: redis``): the ``InflightStore``.

Keys (under ``state.key_prefix``): ``inflight:<worker id>``, a sorted set of that worker's
leases (member: ``<replica>:<serial>``, score: its expiry in ms on the Redis clock), and
the channel ``inflight``, where every take and release is published as
``+|-`` then newline-separated worker id and lease id pairs (one per take, every lease of
one release round trip together). Every script runs on the server's clock, so
replicas' clocks never need to agree. Each set expires as a whole once no replica renews
it, so a fleet that goes away leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence

from redis.asyncio import Redis

from gateway.config import StateConfig
from gateway.state.inflight import Take
from gateway.state.redis_backend import connect

# Drop the expired and answer with the live leases; add this one (and publish it) only if
# the take stands (``inflight.Take``: ARGV[4] this replica's prefix, ARGV[5] its other
# leases held there, ARGV[6] the cap, ARGV[7..] the other replicas' leases the decision
# counted). ZADD is the first write: a store at its memory ceiling refuses the script
# before it changes anything.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local before = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local prefix, ours, cap = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local counted = {}
for i = 7, #ARGV do counted[ARGV[i]] = true end
local others, stands = 0, 1
for _, id in ipairs(before) do
  if string.sub(id, 1, #prefix) ~= prefix then
    others = others + 1
    if not counted[id] then stands = 0 end
  end
end
if cap > 0 and others + ours >= cap then stands = 0 end
if stands == 1 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PUBLISH', KEYS[2], '+\\n' .. ARGV[3] .. '\\n' .. ARGV[1])
end
return {stands, before}
"""
# KEYS[1]: the channel, KEYS[1 + i]: the set of the worker ARGV[2i - 1] whose lease ARGV[2i]
# ends. One message for every lease actually removed.
_RELEASE = """
local removed = {}
for i = 2, #KEYS do
  local worker, id = ARGV[2 * i - 3], ARGV[2 * i - 2]
  if redis.call('ZREM', KEYS[i], id) == 1 then
    removed[#removed + 1] = worker
    removed[#removed + 1] = id
  end
end
if #removed > 0 then redis.call('PUBLISH', KEYS[1], '-\\n' .. table.concat(removed, '\\n')) end
return #removed / 2
"""
# KEYS: every worker's set; ARGV[1]: the TTL in ms, ARGV[1 + i]: this replica's leases on
# KEYS[i], space-separated. Written back without XX: after an outage, or a Redis that lost
# its data, the leases this replica really holds are counted again.
_RENEW_AND_READ = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local mine = ARGV[i + 1]
  if mine ~= '' then
    for id in string.gmatch(mine, '%S+') do
      redis.call('ZADD', key, now + ttl, id)
    end
    redis.call('PEXPIRE', key, ttl)
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  out[i] = redis.call('ZRANGE', key, 0, -1)
end
return out
"""


class RedisInflightStore:
    def __init__(self, config: StateConfig) -> None:
        self._config = config
        self._key_prefix = f"{config.key_prefix}inflight:"
        self.channel = f"{config.key_prefix}inflight"
        self._client: Redis = connect(config, timeout_s=config.timeout_s)
        self._reserve = self._client.register_script(_RESERVE)
        self._release = self._client.register_script(_RELEASE)
        self._renew_and_read = self._client.register_script(_RENEW_AND_READ)

    async def reserve(self, worker_id: str, lease_id: str, ttl_s: float, take: Take) -> tuple[bool, list[str]]:
        args = [lease_id, _ms(ttl_s), worker_id, take.own_prefix, take.ours, take.cap, *take.counted]
        stands, before = await self._reserve(keys=[self._key_prefix + worker_id, self.channel], args=args)
        return bool(stands), [m.decode() for m in before]

    async def release(self, leases: Sequence[tuple[str, str]]) -> None:
        if not leases:
            return
        keys = [self.channel, *(self._key_prefix + worker_id for worker_id, _ in leases)]
        await self._release(keys=keys, args=[part for lease in leases for part in lease])

    async def renew_and_read(
        self, held: Mapping[str, Sequence[str]], workers: Sequence[str], ttl_s: float
    ) -> dict[str, list[str]]:
        names = list(dict.fromkeys([*workers, *held]))
        if not names:
            return {}
        answer = await self._renew_and_read(
            keys=[self._key_prefix + w for w in names], args=[_ms(ttl_s), *(" ".join(held.get(w, ())) for w in names)]
        )
        return {w: [m.decode() for m in ids] for w, ids in zip(names, answer, strict=True)}

    async def follow(
        self, on_delta: Callable[[str, str, str], None], on_subscribed: Callable[[], Awaitable[None]]
    ) -> None:
        listener = connect(self._config, timeout_s=None)
        pubsub = listener.pubsub()
        try:
            async with asyncio.timeout(self._config.timeout_s):
                await pubsub.subscribe(self.channel)
            # Subscribed first, then read: a take between the two is not missed.
            await on_subscribed()
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is None or message.get("type") != "message":
                    continue
                op, *pairs = message["data"].decode().split("\n")
                for worker_id, lease_id in zip(pairs[::2], pairs[1::2], strict=False):
                    on_delta(op, worker_id, lease_id)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()
            with contextlib.suppress(Exception):
                await listener.aclose()

    async def close(self) -> None:
        await self._client.aclose()


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
