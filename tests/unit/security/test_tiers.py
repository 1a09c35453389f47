"""Per-key tiers: named limits (rate, burst, concurrent streams, sessions) assigned per key,
one token-bucket implementation, stream slots counted here or fleet-wide."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config import AuthConfig, TierConfig
from gateway.security.auth import ApiKeyAuth, hash_key
from gateway.security.errors import AuthError
from gateway.state.errors import StateUnavailable
from gateway.state.stream_limit import LocalStreamLimiter, SharedStreamLimiter
from tests.unit.state.fakes import FakeBackend

FREE, PRO, LEGACY = "hgw-free-key", "hgw-pro-key", "hgw-unnamed-key"


def config(**extra: object) -> AuthConfig:
    document: dict[str, object] = {
        "api_key_sha256": [hash_key(LEGACY)],
        "rate_limit_rps": 0.5,
        "rate_limit_burst": 1,
        "tiers": {
            "free": {"rate_limit_rps": 1.0, "rate_limit_burst": 2, "max_concurrent_streams": 1, "max_sessions": 1},
            "pro": {"max_concurrent_streams": 2},
        },
        "keys": [
            {"name": "acme-free", "sha256": hash_key(FREE), "tier": "free"},
            {"name": "acme-prod", "sha256": hash_key(PRO), "tier": "pro"},
        ],
    }
    document.update(extra)
    return AuthConfig.model_validate(document)


class Clock:
    now = 10.0

    def __call__(self) -> float:
        return self.now


async def test_each_key_gets_its_tiers_rate_and_unnamed_keys_the_default_tier() -> None:
    auth = ApiKeyAuth(config(), clock=Clock())
    free = await auth.admit(f"Bearer {FREE}")
    assert (free.tier, free.name, free.label) == ("free", "acme-free", "acme-free")
    await auth.admit(f"Bearer {FREE}")
    with pytest.raises(AuthError) as refused:
        await auth.admit(f"Bearer {FREE}")  # the free tier's burst of 2 is spent
    assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"
    for _ in range(100):
        await auth.admit(f"Bearer {PRO}")  # the pro tier sets no rate: unlimited
    legacy = await auth.admit(f"Bearer {LEGACY}")
    assert (legacy.tier, legacy.name, legacy.label) == ("default", None, hash_key(LEGACY)[:12])
    with pytest.raises(AuthError) as legacy_refused:
        await auth.admit(f"Bearer {LEGACY}")  # default tier: rate_limit_rps 0.5, burst 1
    assert legacy_refused.value.retry_after == 2


async def test_a_key_over_its_concurrent_streams_gets_429_with_retry_after() -> None:
    auth = ApiKeyAuth(config())
    pro = await auth.admit(f"Bearer {PRO}")
    first, second = await auth.open_stream(pro), await auth.open_stream(pro)
    assert first is not None and second is not None
    with pytest.raises(AuthError) as refused:
        await auth.open_stream(pro)
    error = refused.value
    assert error.status == 429 and error.headers["Retry-After"] == "1"
    assert error.envelope()["error"] == {
        "message": error.message,
        "type": "requests",
        "param": None,
        "code": "concurrent_streams_exceeded",
    }
    assert "2 speech stream(s)" in error.message and "pro" in error.message
    free = await auth.admit(f"Bearer {FREE}")
    assert await auth.open_stream(free) is not None  # another key, its own slots
    await first.release()
    await first.release()  # twice is harmless: frees one slot, not two
    third = await auth.open_stream(pro)
    assert third is not None
    with pytest.raises(AuthError):
        await auth.open_stream(pro)


async def test_tiers_without_a_stream_limit_and_open_gateways_take_no_slot() -> None:
    assert await ApiKeyAuth(config()).open_stream(await ApiKeyAuth(config()).admit(f"Bearer {LEGACY}")) is None
    open_gateway = ApiKeyAuth(AuthConfig())
    assert await open_gateway.open_stream(await open_gateway.admit(None)) is None


async def test_local_slots_leave_nothing_behind() -> None:
    limiter = LocalStreamLimiter()
    slots = [await limiter.acquire("k", 3) for _ in range(3)]
    assert await limiter.acquire("k", 3) is None
    for slot in slots:
        assert slot is not None
        await slot.release()
        await slot.release()  # a second release gives back nothing more
    again = [await limiter.acquire("k", 3) for _ in range(3)]  # every slot came back, no more
    assert all(slot is not None for slot in again) and await limiter.acquire("k", 3) is None
    for slot in again:
        assert slot is not None
        await slot.release()
    assert limiter._counts == {}  # no entry kept per key that ever streamed


async def test_shared_slots_are_one_limit_for_every_replica() -> None:
    store, failures = FakeBackend(), []
    first = SharedStreamLimiter(store, "open", 30.0, failures.append)
    second = SharedStreamLimiter(store, "open", 30.0, failures.append)
    held = await first.acquire("digest", 2)
    assert held is not None and await second.acquire("digest", 2) is not None
    assert await first.acquire("digest", 2) is None and await second.acquire("digest", 2) is None
    assert len(store.streams["digest"]) == 2 and failures == []
    await first.renew()
    assert store.renewed == [("digest", holder) for holder in first.held()]
    await held.release()
    assert first.held() == {} and len(store.streams["digest"]) == 1
    assert await second.acquire("digest", 2) is not None


async def test_shared_slots_follow_the_failure_mode_when_the_store_is_away() -> None:
    store, failures = FakeBackend(), []
    store.reachable = False
    slot = await SharedStreamLimiter(store, "open", 30.0, failures.append).acquire("digest", 1)
    assert slot is not None
    await slot.release()  # nothing was taken: nothing to give back
    with pytest.raises(StateUnavailable):
        await SharedStreamLimiter(store, "closed", 30.0, failures.append).acquire("digest", 1)
    assert failures == ["open", "closed"]


def test_config_names_every_problem_with_keys_and_tiers() -> None:
    with pytest.raises(ValidationError) as bad:
        AuthConfig.model_validate(
            {
                "tiers": {"gold plated": {}},
                "keys": [
                    {"name": "a", "sha256": hash_key("x"), "tier": "platinum"},
                    {"name": "a", "sha256": hash_key("x")},
                ],
            }
        )
    message = str(bad.value)
    assert "tiers.gold plated: not a valid tier name" in message
    assert "keys.0.tier: no tier 'platinum'" in message
    assert "keys.1.name: 'a' is used by another key" in message
    assert "keys.1.sha256: the same key is configured twice" in message
    with pytest.raises(ValidationError, match="not both"):
        AuthConfig.model_validate({"rate_limit_rps": 3, "tiers": {"default": {"rate_limit_rps": 5}}})
    with pytest.raises(ValidationError, match="sha256 hex digest"):
        AuthConfig.model_validate({"keys": [{"name": "raw", "sha256": "my-raw-key"}]})
    with pytest.raises(ValidationError):
        AuthConfig.model_validate({"keys": [{"name": "has space", "sha256": hash_key("y")}]})


def test_the_default_tier_comes_from_the_flat_settings_unless_defined() -> None:
    flat = AuthConfig(rate_limit_rps=4, rate_limit_burst=8)
    assert flat.tier("default") == TierConfig(rate_limit_rps=4, rate_limit_burst=8)
    defined = AuthConfig.model_validate({"tiers": {"default": {"max_concurrent_streams": 3}}})
    assert defined.tier("default").max_concurrent_streams == 3
    assert defined.tier_names() == ["default"]
    assert config().tier("free").max_sessions == 1  # enforced at the voice-session handshake
