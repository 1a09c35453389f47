"""Per-API-key rate limits: in-process token buckets, or one fleet-wide bucket per key.

With the local backend each replica counts alone (as a single gateway should). With
Redis the bucket lives on the server and is spent by one atomic script, so a key sent
through any number of replicas is held to its one limit. When Redis cannot answer, the
limiter fails open (the request goes through) or closed (503) as configured, and every
such request is counted. A store that answers but is full is no outage: the bucket cannot
be written, so the request is refused (503) in either mode (mode ``full`` in the count).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, Protocol

from gateway.state.errors import StateFull, StateUnavailable


FULL = "full"  # the count's mode for a store at its memory ceiling: always refused
FULL_MESSAGE = (
    "{what} cannot be checked right now (the shared state store is full); retry shortly. "
    "Operators: delete unused voices or give Redis more memory."
)


class RateLimiter(Protocol):
    async def take(self, key: str, rate: float, burst: int) -> float:
        """Spend one token of ``key``'s bucket: 0.0 if allowed, else seconds to wait."""
        ...


class TokenBucket:
    """``burst`` requests at once, refilled at ``rate`` per second."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.stamp = now

    def take(self, now: float) -> float:
        """Spend one token; return 0.0 on success, else the seconds until one is available."""
        self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class TokenBuckets:
    """One bucket per key, in this process; limits changed at run time apply at once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def take(self, key: str, rate: float, burst: int) -> float:
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(rate, burst, now)
        bucket.rate, bucket.burst = rate, burst
        return bucket.take(now)


class LocalRateLimiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._buckets = TokenBuckets(clock)

    async def take(self, key: str, rate: float, burst: int) -> float:
        return self._buckets.take(key, rate, burst)


class SharedTokenSource(Protocol):
    @property
    def up(self) -> bool: ...

    async def take_token(self, key: str, rate: float, burst: int) -> float: ...


class SharedRateLimiter:
    """The fleet-wide bucket in the shared store, with the configured failure mode.

    While the store is known to be down no call is tried: every request would otherwise
    wait for a timeout. The backend's reconnect loop says when it is back.
    """

    def __init__(
        self,
        source: SharedTokenSource,
        failure_mode: Literal["open", "closed"],
        on_unavailable: Callable[[str], None] = lambda mode: None,
    ) -> None:
        self._source = source
        self._failure_mode = failure_mode
        self._on_unavailable = on_unavailable

    async def take(self, key: str, rate: float, burst: int) -> float:
        if self._source.up:
            try:
                return await self._source.take_token(key, rate, burst)
            except StateFull:
                self._on_unavailable(FULL)
                raise StateFull(FULL_MESSAGE.format(what="Rate limits")) from None
            except StateUnavailable:
                pass
        self._on_unavailable(self._failure_mode)
        if self._failure_mode == "closed":
            raise StateUnavailable("Rate limits cannot be checked right now (shared state store unavailable); retry shortly.")
        return 0.0
