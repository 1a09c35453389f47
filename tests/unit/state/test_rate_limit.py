"""Per-key limits: one fleet-wide bucket when shared, and what happens when it cannot be asked."""

from __future__ import annotations

import pytest

from gateway.config import AuthConfig
from gateway.security.auth import ApiKeyAuth, hash_key
from gateway.security.errors import AuthError
from gateway.state.errors import StateUnavailable
from gateway.state.rate_limit import SharedRateLimiter
from tests.unit.state.fakes import FakeBackend


def auth(backend: FakeBackend, mode: str, failures: list[str]) -> ApiKeyAuth:
    config = AuthConfig(api_key_sha256=[hash_key("k")], rate_limit_rps=1.0, rate_limit_burst=2)
    return ApiKeyAuth(config, limiter=SharedRateLimiter(backend, mode, failures.append))  # type: ignore[arg-type]


async def test_the_shared_bucket_decides() -> None:
    backend, failures = FakeBackend(), []
    limited = auth(backend, "open", failures)
    await limited.admit("Bearer k")
    await limited.admit("Bearer k")
    with pytest.raises(AuthError) as refused:
        await limited.admit("Bearer k")
    assert refused.value.status == 429 and failures == []
    assert list(backend.tokens) == [hash_key("k")]  # one bucket per key, named by its digest


async def test_unreachable_store_fails_open_and_counts() -> None:
    backend, failures = FakeBackend(), []
    backend.reachable = False
    limited = auth(backend, "open", failures)
    for _ in range(5):
        await limited.admit("Bearer k")
    assert failures == ["open"] * 5


async def test_unreachable_store_fails_closed_when_configured() -> None:
    backend, failures = FakeBackend(), []
    backend.reachable = False
    with pytest.raises(StateUnavailable):
        await auth(backend, "closed", failures).admit("Bearer k")
    assert failures == ["closed"]


async def test_unknown_keys_never_reach_the_store() -> None:
    backend, failures = FakeBackend(), []
    with pytest.raises(AuthError):
        await auth(backend, "open", failures).admit("Bearer wrong")
    assert backend.tokens == {}
