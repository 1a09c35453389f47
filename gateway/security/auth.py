"""Optional API keys for ``/v1/*``, each in a tier of limits: requests per second (a token
bucket) and concurrent speech streams per key.

Keys are configured as sha256 hex digests, so a leaked config file or admin-API echo does
not leak usable keys. A presented key is hashed and compared against every configured
digest with ``hmac.compare_digest``, without stopping at the first match: comparing
fixed-length digests in constant time means response timing says nothing about how much
of a guess was right. Keys themselves are never logged or stored; a request is known by
``KeyIdentity.key_id`` (a short digest prefix) and, for a named key, by its configured
name from here on.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable

from gateway.config import AuthConfig
from gateway.security.errors import AuthError
from gateway.state.rate_limit import LocalRateLimiter, RateLimiter
from gateway.state.stream_limit import LocalStreamLimiter, StreamLimiter, StreamSlot
# The identity is shared vocabulary (the recorder's records carry it); re-exported here.
from gateway.types.records import DEFAULT_TIER, KeyIdentity as KeyIdentity

KEY_ID_CHARS = 12
# A stream slot frees when some stream of the key ends: no time can be promised, so the
# client is asked to come back after a second, as admission's own 429s do by default.
STREAM_RETRY_AFTER_S = 1


def hash_key(key: str) -> str:
    """The sha256 hex digest to put in ``auth.api_key_sha256`` for ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()




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
    """``admit(authorization_header)`` for every ``/v1`` request, ``open_stream`` for speech.

    Reads the config on every call, so keys, tiers and limits changed at run time apply at
    once. Limits are kept only for configured keys: unknown keys cannot grow memory. The
    limiters are this process's by default, the shared store's (fleet-wide) when given.
    """

    def __init__(
        self,
        config: AuthConfig,
        clock: Callable[[], float] = time.monotonic,
        limiter: RateLimiter | None = None,
        streams: StreamLimiter | None = None,
    ) -> None:
        self._config = config
        self._limiter = limiter if limiter is not None else LocalRateLimiter(clock)
        self._streams = streams if streams is not None else LocalStreamLimiter()

    @property
    def enabled(self) -> bool:
        return self._config.keys_configured

    async def admit(self, authorization: str | None) -> KeyIdentity:
        """Authenticate and rate-limit one request; raise ``AuthError`` (401/429) to refuse
        (``StateUnavailable`` 503 when a fleet-wide limit cannot be checked, failing closed)."""
        identity = self.authenticate(authorization)
        await self.spend(identity)
        return identity

    async def spend(self, identity: KeyIdentity) -> None:
        """One request against the key's rate limit; 429 with ``Retry-After`` when over it."""
        if identity.digest is None:
            return
        tier = self._config.tier(identity.tier)
        rate, burst = tier.rate_limit_rps, tier.rate_limit_burst
        if rate <= 0:
            return
        wait = await self._limiter.take(identity.digest, rate, burst)
        if wait > 0:
            raise AuthError(
                429,
                f"Rate limit reached for this API key ({rate:g} requests/s, burst {burst}); retry later.",
                "rate_limit_exceeded",
                retry_after=max(1, math.ceil(wait)),
            )

    async def open_stream(self, identity: KeyIdentity) -> StreamSlot | None:
        """One of the key's concurrent-stream slots (None: its tier sets no limit); 429 when
        every slot is in use."""
        if identity.digest is None:
            return None
        limit = self._config.tier(identity.tier).max_concurrent_streams
        if limit is None:
            return None
        slot = await self._streams.acquire(identity.digest, limit)
        if slot is None:
            raise AuthError(
                429,
                f"This API key already has {limit} speech stream(s) in progress, the most its tier "
                f"({identity.tier}) allows; retry when one has finished.",
                "concurrent_streams_exceeded",
                retry_after=STREAM_RETRY_AFTER_S,
            )
        return slot

    async def open_session(self, identity: KeyIdentity) -> StreamSlot | None:
        """One of the key's voice-session places (None: its tier sets no limit); 429 when
        every one is in use. Counted by the same limiter as streams, under its own name."""
        if identity.digest is None:
            return None
        limit = self._config.tier(identity.tier).max_sessions
        if limit is None:
            return None
        slot = await self._streams.acquire(f"sessions:{identity.digest}", limit)
        if slot is None:
            raise AuthError(
                429,
                f"This API key already has {limit} voice session(s) open, the most its tier "
                f"({identity.tier}) allows; close one first.",
                "concurrent_sessions_exceeded",
                retry_after=STREAM_RETRY_AFTER_S,
            )
        return slot

    def authenticate(self, authorization: str | None) -> KeyIdentity:
        """Who sent the request (``ANONYMOUS`` when no keys are configured); 401 when not a key."""
        config = self._config
        if not config.keys_configured:
            return ANONYMOUS  # no keys configured: /v1 is open
        token = bearer_token(authorization)
        if token is None:
            raise AuthError(
                401,
                "Missing API key: send it as 'Authorization: Bearer <key>'.",
                "missing_api_key",
                headers={"WWW-Authenticate": 'Bearer realm="api"'},
            )
        presented = hash_key(token)
        matched: KeyIdentity | None = None
        # No early exit: every configured key costs the same time.
        for digest in config.api_key_sha256:
            if hmac.compare_digest(presented, digest):
                matched = KeyIdentity(digest[:KEY_ID_CHARS], True, DEFAULT_TIER, None, digest)
        for key in config.keys:
            if hmac.compare_digest(presented, key.sha256):
                matched = KeyIdentity(key.sha256[:KEY_ID_CHARS], True, key.tier, key.name, key.sha256)
        if matched is None:
            raise AuthError(
                401,
                "Incorrect API key provided.",
                "invalid_api_key",
                headers={"WWW-Authenticate": 'Bearer realm="api", error="invalid_token"'},
            )
        return matched
