"""Shared state in one Redis: every replica reads and writes the same keys.

Keys (all under ``state.key_prefix``): ``routing`` (the overrides, JSON), ``drained`` (a
set of worker ids), ``voices`` (a hash: voice key -> metadata JSON) with ``voice:<key>``
(the audio), ``ratelimit:<key digest>`` (one token bucket per API key),
``streams:<key digest>`` (a sorted set of the key's stream leases), and the pub/sub
channel ``changes``. Every multi-key write is one Lua script or transaction, so a reader
never sees a voice's metadata without its audio, and every write publishes what changed.

A follower task listens on the channel and re-reads the changed part at once (a change
reaches every replica within milliseconds), re-reads everything every
``resync_interval_s`` as a safety net, and reconnects with a doubling back-off when the
connection drops. While Redis is away, ``up`` is false and the gateway keeps serving from
what it last read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError, RedisError
from redis.asyncio.retry import Retry

from gateway.config import ConfigError, StateConfig
from gateway.state.backend import ChangeKind, ChangeListener, RoutingUpdate, StoredVoice
from gateway.state.errors import StateFull, StateUnavailable
from gateway.voices.names import name_key

log = logging.getLogger(__name__)

T = TypeVar("T")
FIRST_BACKOFF_S = 0.1
SEEDING_LOCK_MS = 30_000  # long enough to copy a replica's voices; expires if it dies
ROUTING_CAS_ATTEMPTS = 10
# Voices may fill this share of Redis' maxmemory; the rest stays for the per-key limits
# (buckets, stream leases), so voices can never push Redis to its ceiling, where volatile-lru
# would evict the leases of running streams and every limit write would be refused.
VOICE_MEMORY_SHARE = 0.9
FULL = b"full"  # what a script answers instead of writing past the ceiling

# Is Redis (plus ``extra`` bytes about to be written) over ``share`` of its maxmemory?
# Checked inside the voice script, so the check and the write are one atomic step. Only
# there: INFO costs ~20 us of Redis CPU, too much for every limit check, where Redis' own
# OOM refusal of a script's first write does the job (a limit write is tiny).
_OVER_CEILING = """
local function over_ceiling(extra, share)
  local info = redis.call('INFO', 'memory')
  local limit = tonumber(string.match(info, '\\nmaxmemory:(%d+)')) or 0
  if limit == 0 then return false end
  local used = tonumber(string.match(info, '\\nused_memory:(%d+)')) or 0
  return used + extra > limit * share
end
"""

# Stores ARGV[2] only if the key still holds ARGV[1] ('' = absent): read-merge-write of the
# routing overrides without losing a concurrent patch from another replica.
_ROUTING_CAS = """
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('PUBLISH', KEYS[2], 'routing')
return 1
"""
_ROUTING_SET = """
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PUBLISH', KEYS[2], 'routing')
return 1
"""
_PUT_VOICE = _OVER_CEILING + """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if over_ceiling(string.len(ARGV[3]), tonumber(ARGV[4])) then return 'full' end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PUBLISH', KEYS[3], 'voices')
return 1
"""
_DELETE_VOICE = """
local meta = redis.call('HGET', KEYS[1], ARGV[1])
if not meta then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('PUBLISH', KEYS[3], 'voices')
return meta
"""
# A voice's metadata and audio in one consistent read. A script, not MULTI/EXEC: a Redis at
# its maxmemory refuses every command queued in a transaction, reads included.
_READ_VOICE = """
return {redis.call('HGET', KEYS[1], ARGV[1]), redis.call('GET', KEYS[2])}
"""
# One fleet-wide token bucket per key, on the server's clock (replicas' clocks may differ).
# Returns the seconds until a token is available as a string ("0" = taken): Lua numbers
# would be truncated to integers on the way back.
_TAKE_TOKEN = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens = tonumber(state[1]) or burst
local stamp = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - stamp) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'stamp', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""

# A stream slot of one key: drop expired leases, then add ARGV[2] if fewer than ARGV[1] are
# held. Scores are expiry times in ms on the server's clock. 1 = taken, 0 = all in use.
# Live leases are counted (a read) and ZADD is the first write: Redis refuses a script's
# first write with OOM while it is over maxmemory, so a full store refuses the lease rather
# than store one that volatile-lru would evict at once (deletes would pass that check).
_ACQUIRE_STREAM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
if redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf') >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
"""
# Pushes the expiry of leases still held (KEYS[i] holds ARGV[i + 1]); XX: a lease that
# already expired and was dropped is not brought back over a limit others now fill.
_RENEW_STREAMS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + ttl, ARGV[i + 1])
  redis.call('PEXPIRE', key, ttl)
end
return #KEYS
"""


def connect(config: StateConfig, *, timeout_s: float | None) -> Redis:
    """A client for ``state.redis_url``; ``timeout_s=None`` for the pub/sub listener,
    whose reads legitimately wait for the next message."""
    assert config.redis_url is not None
    url = config.redis_url.get_secret_value()
    options: dict[str, Any] = {
        "socket_connect_timeout": config.timeout_s,
        "socket_timeout": timeout_s,
        # Failures surface at once: the gateway has its own fallbacks and reconnect loop.
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": False,
    }
    password = redis_password(config)
    if password is not None:
        options["password"] = password
    if url.lower().startswith("rediss://"):
        options["ssl_cert_reqs"] = "required" if config.tls_verify else "none"
        if config.tls_ca_file is not None:
            options["ssl_ca_certs"] = str(config.tls_ca_file)
    return Redis.from_url(url, **options)


def redis_password(config: StateConfig) -> str | None:
    """The password kept out of the URL, if any. The file is read on every call, so a
    rotated Secret applies to the next connection."""
    if config.redis_password is not None:
        return config.redis_password.get_secret_value()
    if config.redis_password_file is None:
        return None
    try:
        # Secrets written with `echo` or an editor end with a newline that is no part of it.
        return config.redis_password_file.read_text().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"state.redis_password_file: cannot read {config.redis_password_file}: {exc}") from exc


class RedisStateBackend:
    name = "redis"

    def __init__(self, config: StateConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        prefix = config.key_prefix
        self._routing_key = f"{prefix}routing"
        self._drained_key = f"{prefix}drained"
        self._voices_key = f"{prefix}voices"
        self._voice_prefix = f"{prefix}voice:"
        self._rate_prefix = f"{prefix}ratelimit:"
        self._streams_prefix = f"{prefix}streams:"
        self._initialized_key = f"{prefix}initialized"
        self._seeding_key = f"{prefix}seeding"
        self.channel = f"{prefix}changes"
        self._client = connect(config, timeout_s=config.timeout_s)
        self._routing_cas = self._client.register_script(_ROUTING_CAS)
        self._routing_set = self._client.register_script(_ROUTING_SET)
        self._put_voice = self._client.register_script(_PUT_VOICE)
        self._delete_voice = self._client.register_script(_DELETE_VOICE)
        self._read_voice = self._client.register_script(_READ_VOICE)
        self._take_token = self._client.register_script(_TAKE_TOKEN)
        self._acquire_stream = self._client.register_script(_ACQUIRE_STREAM)
        self._renew_streams = self._client.register_script(_RENEW_STREAMS)
        self._up = False
        self._follower: asyncio.Task[None] | None = None
        self._on_up_change: list[Callable[[bool], None]] = []

    @property
    def up(self) -> bool:
        return self._up

    def on_up_change(self, listener: Callable[[bool], None]) -> None:
        self._on_up_change.append(listener)

    def _set_up(self, up: bool) -> None:
        if up == self._up:
            return
        self._up = up
        if up:
            log.info("shared state store reachable again")
        else:
            log.warning("shared state store unreachable; serving from the last known state")
        for listener in self._on_up_change:
            listener(up)

    # ---- lifecycle -------------------------------------------------------------------
    async def start(self, on_change: ChangeListener | None = None) -> None:
        """Try once to reach Redis (a start never waits for it), then follow it."""
        try:
            await self._call(self._client.ping())
            self._set_up(True)
        except StateUnavailable:
            self._set_up(False)
        if on_change is not None:
            self._follower = asyncio.get_running_loop().create_task(self._follow(on_change), name="state-follower")

    async def close(self) -> None:
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        await self._client.aclose()

    # ---- an empty store ----------------------------------------------------------------
    async def initialized(self) -> bool:
        return bool(await self._call(self._client.exists(self._initialized_key)))

    async def claim_seeding(self) -> bool:
        return bool(await self._call(self._client.set(self._seeding_key, b"1", nx=True, px=SEEDING_LOCK_MS)))

    async def mark_initialized(self) -> None:
        async def write() -> None:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.set(self._initialized_key, b"1")
                pipe.delete(self._seeding_key)
                pipe.publish(self.channel, b"all")  # every replica re-reads everything
                await pipe.execute()

        await self._call(write())

    # ---- routing ---------------------------------------------------------------------
    async def read_routing(self) -> dict[str, Any]:
        raw = await self._call(self._client.get(self._routing_key))
        return _routing_document(raw)

    async def update_routing(self, update: RoutingUpdate) -> dict[str, Any]:
        for _ in range(ROUTING_CAS_ATTEMPTS):
            raw = await self._call(self._client.get(self._routing_key))
            overrides = update(_routing_document(raw))  # raises on an invalid result
            stored = await self._call(
                self._routing_cas(keys=[self._routing_key, self.channel], args=[raw or b"", _dumps(overrides)])
            )
            if stored == 1:
                return overrides
        raise StateUnavailable("The routing config kept changing under this update; retry it.")

    async def replace_routing(self, overrides: dict[str, Any]) -> None:
        await self._call(self._routing_set(keys=[self._routing_key, self.channel], args=[_dumps(overrides)]))

    # ---- drains ----------------------------------------------------------------------
    async def read_drains(self) -> set[str]:
        members = await self._call(self._client.smembers(self._drained_key))
        return {m.decode() for m in members}

    async def set_drained(self, worker_id: str, drained: bool) -> None:
        async def write() -> None:
            async with self._client.pipeline(transaction=True) as pipe:
                if drained:
                    pipe.sadd(self._drained_key, worker_id)
                else:
                    pipe.srem(self._drained_key, worker_id)
                pipe.publish(self.channel, ChangeKind.DRAINS.value)
                await pipe.execute()

        await self._call(write())

    # ---- voices ----------------------------------------------------------------------
    async def voice_metas(self) -> dict[str, dict[str, Any]]:
        entries = await self._call(self._client.hgetall(self._voices_key))
        metas: dict[str, dict[str, Any]] = {}
        for key, raw in entries.items():
            try:
                metas[key.decode()] = json.loads(raw)
            except ValueError:
                log.warning("ignoring unreadable voice metadata %r in the shared store", key)
        return metas

    async def read_voice(self, name: str) -> StoredVoice | None:
        key = name_key(name)

        meta, audio = await self._call(self._read_voice(keys=[self._voices_key, self._voice_prefix + key], args=[key]))
        if meta is None or audio is None:
            return None
        return StoredVoice(json.loads(meta), bytes(audio))

    async def put_voice(self, voice: StoredVoice) -> bool:
        key = name_key(voice.worker_name)
        stored = await self._call(
            self._put_voice(
                keys=[self._voices_key, self._voice_prefix + key, self.channel],
                args=[key, _dumps(voice.meta), voice.audio, repr(VOICE_MEMORY_SHARE)],
            )
        )
        _refuse_if_full(stored)
        return bool(stored == 1)

    async def delete_voice(self, name: str) -> dict[str, Any] | None:
        key = name_key(name)
        meta = await self._call(
            self._delete_voice(keys=[self._voices_key, self._voice_prefix + key, self.channel], args=[key])
        )
        return None if meta is None else dict(json.loads(meta))

    # ---- rate limits -----------------------------------------------------------------
    async def take_token(self, key: str, rate: float, burst: int) -> float:
        wait = await self._call(self._take_token(keys=[self._rate_prefix + key], args=[repr(rate), burst]))
        return float(wait)

    # ---- stream limits ---------------------------------------------------------------
    async def acquire_stream(self, key: str, limit: int, holder: str, ttl_s: float) -> bool:
        taken = await self._call(
            self._acquire_stream(keys=[self._streams_prefix + key], args=[limit, holder, _ms(ttl_s)])
        )
        return bool(taken == 1)

    async def release_stream(self, key: str, holder: str) -> None:
        await self._call(self._client.zrem(self._streams_prefix + key, holder))

    async def renew_streams(self, leases: Sequence[tuple[str, str]], ttl_s: float) -> None:
        keys = [self._streams_prefix + key for key, _ in leases]
        await self._call(self._renew_streams(keys=keys, args=[_ms(ttl_s), *(holder for _, holder in leases)]))

    async def stream_holders(self, key: str) -> list[str]:
        """Leases of ``key`` not yet expired (for operators and tests)."""
        now_s, now_us = await self._call(self._client.time())
        now_ms = now_s * 1000 + now_us // 1000
        members = await self._call(self._client.zrangebyscore(self._streams_prefix + key, now_ms + 1, "+inf"))
        return [m.decode() for m in members]

    # ---- internals -------------------------------------------------------------------
    async def _call(self, operation: Awaitable[T]) -> T:
        """One Redis call, bounded by ``state.timeout_s``; any failure is StateUnavailable.

        ``asyncio.timeout``, not ``wait_for``: on Python 3.11 ``wait_for`` returns the result
        of a call that finished as its caller was cancelled, swallowing the cancellation."""
        try:
            async with asyncio.timeout(self._config.timeout_s):
                return await operation
        except OutOfMemoryError as exc:
            # Reachable but full (maxmemory, nothing left it may evict): this write is
            # refused, reads and deletes still work, so the store is not marked down.
            raise StateFull(STORE_FULL_MESSAGE) from exc
        except (RedisError, OSError, TimeoutError) as exc:
            self._set_up(False)
            raise StateUnavailable() from exc

    async def _follow(self, on_change: ChangeListener) -> None:
        backoff = FIRST_BACKOFF_S
        while True:
            listener = connect(self._config, timeout_s=None)
            pubsub = listener.pubsub()
            try:
                async with asyncio.timeout(self._config.timeout_s):
                    await pubsub.subscribe(self.channel)
                # Subscribed first, then read: a change between the two is not missed.
                await on_change(None)
                self._set_up(True)
                backoff = FIRST_BACKOFF_S
                await self._listen(pubsub, on_change)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, asyncio.TimeoutError, StateUnavailable) as exc:
                self._set_up(False)
                log.debug("state follower lost Redis: %s", exc)
            except Exception:
                self._set_up(False)
                log.exception("applying shared state failed; re-reading after a back-off")
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                with contextlib.suppress(Exception):
                    await listener.aclose()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._config.reconnect_max_backoff_s)

    async def _listen(self, pubsub: PubSub, on_change: ChangeListener) -> None:
        next_resync = self._clock() + self._config.resync_interval_s
        while True:
            remaining = max(0.0, next_resync - self._clock())
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=min(1.0, remaining))
            if message is not None and message.get("type") == "message":
                try:
                    kind: ChangeKind | None = ChangeKind(message["data"].decode())
                except ValueError:
                    kind = None
                await on_change(kind)
            if self._clock() >= next_resync:
                await on_change(None)  # the safety net: a lost message is repaired here
                self._set_up(True)
                next_resync = self._clock() + self._config.resync_interval_s


STORE_FULL_MESSAGE = (
    "The shared state store is full (Redis maxmemory); nothing was changed. "
    "Delete unused voices or give Redis more memory."
)


def _refuse_if_full(answer: object) -> None:
    """A script that found Redis at its ceiling wrote nothing and said so."""
    if answer == FULL:
        raise StateFull(STORE_FULL_MESSAGE)


def _routing_document(raw: bytes | None) -> dict[str, Any]:
    if not raw:
        return {}
    document = json.loads(raw)
    if not isinstance(document, dict):
        raise StateUnavailable("The shared routing overrides are not a JSON object; fix or delete the key.")
    return document


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
