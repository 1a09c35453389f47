import hashlib
import io

import pytest
from pydantic import ValidationError

from gateway.config import AuthConfig
from gateway.security import auth as auth_module
from gateway.security.auth import ApiKeyAuth, hash_key
from gateway.security.errors import AuthError
from gateway.security.keys import main as keys_main

KEY_A, KEY_B = "hgw-alpha-key", "hgw-bravo-key"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(rps=0.0, burst=20, keys=(KEY_A, KEY_B), clock=None):
    config = AuthConfig(
        api_key_sha256=[hash_key(k) for k in keys], rate_limit_rps=rps, rate_limit_burst=burst
    )
    return ApiKeyAuth(config, clock=clock or FakeClock()), config


async def test_open_when_no_keys_are_configured():
    auth = ApiKeyAuth(AuthConfig())
    assert not auth.enabled
    assert (await auth.admit(None)).authenticated is False
    assert (await auth.admit("Bearer anything")).key_id == "anonymous"


def test_hash_key_is_plain_sha256_hex():
    assert hash_key("abc") == hashlib.sha256(b"abc").hexdigest()


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer   ", "Basic dXNlcjpwYXNz", KEY_A])
async def test_missing_key_is_401_with_challenge(header):
    auth, _ = make()
    with pytest.raises(AuthError) as err:
        await auth.admit(header)
    assert err.value.status == 401 and err.value.code == "missing_api_key"
    assert err.value.headers["WWW-Authenticate"].startswith("Bearer")


async def test_wrong_key_is_401_and_never_echoed():
    auth, _ = make()
    with pytest.raises(AuthError) as err:
        await auth.admit("Bearer hgw-wrong-key")
    assert err.value.status == 401 and err.value.code == "invalid_api_key"
    assert "hgw-wrong-key" not in str(err.value.envelope())


@pytest.mark.parametrize(
    "header", [f"Bearer {KEY_A}", f"bearer {KEY_A}", f"BEARER  {KEY_A} ", f"Bearer\t{KEY_A}"]
)
async def test_right_key_passes(header):
    auth, _ = make()
    identity = await auth.admit(header)
    assert identity.authenticated and identity.key_id == hash_key(KEY_A)[:12]


async def test_several_keys_have_distinct_identities():
    auth, _ = make()
    assert await auth.admit(f"Bearer {KEY_A}") != await auth.admit(f"Bearer {KEY_B}")


async def test_every_configured_digest_is_compared_in_constant_time(monkeypatch):
    calls = []

    def spy(a, b):
        calls.append((a, b))
        return a == b

    monkeypatch.setattr(auth_module.hmac, "compare_digest", spy)
    auth, config = make(keys=(KEY_A, KEY_B, "third"))
    await auth.admit(f"Bearer {KEY_A}")  # matches the first, still compares all three
    assert len(calls) == 3
    assert all(len(a) == len(b) == 64 for a, b in calls)  # digests, never raw keys


def test_config_rejects_non_digests_and_normalises_case():
    with pytest.raises(ValidationError, match="sha256 hex digest"):
        AuthConfig(api_key_sha256=["my-raw-key"])
    assert AuthConfig(api_key_sha256=[hash_key("k").upper()]).api_key_sha256 == [hash_key("k")]


async def test_rate_limit_burst_then_429_with_retry_after_then_refill():
    clock = FakeClock()
    auth, _ = make(rps=2.0, burst=3, clock=clock)
    for _ in range(3):
        await auth.admit(f"Bearer {KEY_A}")
    with pytest.raises(AuthError) as err:
        await auth.admit(f"Bearer {KEY_A}")
    assert err.value.status == 429 and err.value.code == "rate_limit_exceeded"
    assert err.value.envelope()["error"]["type"] == "requests"
    assert err.value.headers["Retry-After"] == "1" and err.value.retry_after == 1
    await auth.admit(f"Bearer {KEY_B}")  # buckets are per key
    clock.now += 0.5  # one token back at 2/s
    await auth.admit(f"Bearer {KEY_A}")
    with pytest.raises(AuthError):
        await auth.admit(f"Bearer {KEY_A}")


async def test_retry_after_rounds_up_slow_refills():
    clock = FakeClock()
    auth, _ = make(rps=0.2, burst=1, clock=clock)
    await auth.admit(f"Bearer {KEY_A}")
    with pytest.raises(AuthError) as err:
        await auth.admit(f"Bearer {KEY_A}")
    assert err.value.retry_after == 5


async def test_zero_rps_is_unlimited_and_limits_apply_at_run_time():
    clock = FakeClock()
    auth, config = make(rps=0.0, burst=1, clock=clock)
    for _ in range(100):
        await auth.admit(f"Bearer {KEY_A}")
    config.rate_limit_rps = 1.0
    await auth.admit(f"Bearer {KEY_A}")
    with pytest.raises(AuthError):
        await auth.admit(f"Bearer {KEY_A}")


async def test_failed_auth_spends_no_tokens_and_creates_no_buckets():
    limiter = SpyLimiter()
    config = AuthConfig(api_key_sha256=[hash_key(KEY_A)], rate_limit_rps=1.0, rate_limit_burst=1)
    auth = ApiKeyAuth(config, limiter=limiter)
    for i in range(50):
        with pytest.raises(AuthError):
            await auth.admit(f"Bearer guess-{i}")
    assert limiter.keys == []
    await auth.admit(f"Bearer {KEY_A}")
    assert limiter.keys == [hash_key(KEY_A)]  # limits are kept under the digest, never the key


class SpyLimiter:
    def __init__(self) -> None:
        self.keys: list[str] = []

    async def take(self, key: str, rate: float, burst: int) -> float:
        self.keys.append(key)
        return 0.0


def test_keys_cli(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\n"))
    assert keys_main(["hash"]) == 0
    assert capsys.readouterr().out.strip() == hash_key("s3cret")
    assert keys_main(["new"]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.split("\n") if line)
    assert hash_key(lines["key"].strip()) == lines["sha256"].strip()
