"""Optional API keys for ``/v1/*``, with a token-bucket rate limit per key.

Keys are configured as sha256 hex digests, so a leaked config file or admin-API echo does
not leak usable keys. A presented key is hashed and compared against every configured
digest with ``hmac.compare_digest``, without stopping at the first match: comparing
fixed-length digests in constant time means response timing says nothing about how much
of a guess was right. Keys themselves are never logged or stored; a request is known by
``KeyIdentity.key_id`` (a short digest prefix) from here on.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.config import AuthConfig
from gateway.security.errors import AuthError
from gateway.state.rate_limit import RateLimiter, TokenBucket

KEY_ID_CHARS = 12


def hash_key(key: str) -> str:
    """The sha256 hex digest to put in ``auth.api_key_sha256`` for ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyIdentity:
    key_id: str  # safe to log: a prefix of the key's digest, or "anonymous"
    authenticated: bool


ANONYMOUS = KeyIdentity("anonymous", authenticated=False)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    parts = authorization.split(None, 1)
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    return parts[1].strip() or None


class ApiKeyAuth:
    """``check(authorization_header)`` for every ``/v1`` request.

    Reads the config on every call, so keys and limits changed at run time apply at once.
    Buckets exist only for configured keys: unknown keys cannot grow memory. With a
    ``limiter`` (the fleet-wide one of the shared state), ``admit`` spends there instead.
    """

    def __init__(
        self, config: AuthConfig, clock: Callable[[], float] = time.monotonic, limiter: RateLimiter | None = None
    ) -> None:
        self._config = config
        self._clock = clock
        self._limiter = limiter
        self._buckets: dict[str, TokenBucket] = {}

    @property
    def enabled(self) -> bool:
        return bool(self._config.api_key_sha256)

    def check(self, authorization: str | None) -> KeyIdentity:
        """Authenticate and rate-limit one request; raise ``AuthError`` (401/429) to refuse."""
        identity, digest = self._authenticate(authorization)
        if digest is not None:
            self._spend(digest)
        return identity

    async def admit(self, authorization: str | None) -> KeyIdentity:
        """``check`` with the configured limiter (which may ask the shared store)."""
        identity, digest = self._authenticate(authorization)
        if digest is None:
            return identity
        if self._limiter is None:
            self._spend(digest)
            return identity
        rate, burst = self._config.rate_limit_rps, self._config.rate_limit_burst
        if rate > 0:
            self._refuse_if_waiting(await self._limiter.take(digest, rate, burst), rate, burst)
        return identity

    def _authenticate(self, authorization: str | None) -> tuple[KeyIdentity, str | None]:
        configured = self._config.api_key_sha256
        if not configured:
            return ANONYMOUS, None  # no keys configured: /v1 is open
        token = bearer_token(authorization)
        if token is None:
            raise AuthError(
                401,
                "Missing API key: send it as 'Authorization: Bearer <key>'.",
                "missing_api_key",
                headers={"WWW-Authenticate": 'Bearer realm="api"'},
            )
        presented = hash_key(token)
        matched: str | None = None
        for digest in configured:  # no early exit: every key costs the same time
            if hmac.compare_digest(presented, digest):
                matched = digest
        if matched is None:
            raise AuthError(
                401,
                "Incorrect API key provided.",
                "invalid_api_key",
                headers={"WWW-Authenticate": 'Bearer realm="api", error="invalid_token"'},
            )
        return KeyIdentity(matched[:KEY_ID_CHARS], authenticated=True), matched

    def _spend(self, digest: str) -> None:
        rate, burst = self._config.rate_limit_rps, self._config.rate_limit_burst
        if rate <= 0:
            return
        now = self._clock()
        bucket = self._buckets.get(digest)
        if bucket is None:
            bucket = self._buckets[digest] = TokenBucket(rate, burst, now)
        bucket.rate, bucket.burst = rate, burst
        self._refuse_if_waiting(bucket.take(now), rate, burst)

    @staticmethod
    def _refuse_if_waiting(wait: float, rate: float, burst: int) -> None:
        if wait > 0:
            raise AuthError(
                429,
                f"Rate limit reached for this API key ({rate:g} requests/s, burst {burst}); retry later.",
                "rate_limit_exceeded",
                retry_after=max(1, math.ceil(wait)),
            )
