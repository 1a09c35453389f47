"""Security, a full shared store: voices fill Redis to its ``maxmemory``, and then the
fleet-wide limits must still hold. A full store is no outage: every limit write is refused,
so the limit refuses too (503 + Retry-After), whatever ``rate_limit_failure_mode`` says;
``open`` stays the answer to a Redis that cannot be reached at all.

A real ``redis-server`` with the manifests' eviction policy; the ceiling is lowered under
what the voices already use (``CONFIG SET maxmemory``), which is where ~530 uploads of 30 s
clips leave a 768 MiB Redis, with no disposable bucket left to evict.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.config import ApiKeyConfig, AuthConfig, StateConfig, TierConfig
from gateway.security.auth import ApiKeyAuth, hash_key
from gateway.state.backend import StoredVoice
from gateway.state.errors import StateFull, StateUnavailable
from gateway.state.rate_limit import SharedRateLimiter
from gateway.state.redis_backend import RedisStateBackend
from gateway.state.stream_limit import SharedStreamLimiter
from tests.integration.test_state_redis_limits import META, manifest_option
from tests.support.redis_server import RedisServer, running_redis

KEY = "sk-test-store-full-3b9e1c7d"


@pytest.fixture()
async def full_store(tmp_path: Path) -> AsyncIterator[tuple[RedisServer, RedisStateBackend]]:
    args = ["--maxmemory", "64mb", "--maxmemory-policy", manifest_option("--maxmemory-policy")]
    with running_redis(tmp_path / "redis", args=args) as server:
        backend = RedisStateBackend(StateConfig(backend="redis", redis_url=server.url))
        await backend.start()
        try:
            for i in range(20):
                assert await backend.put_voice(StoredVoice({**META, "name": f"voice-{i}"}, bytes([i]) * 100_000))
            # Some keys' buckets exist (disposable: evicted first), then the ceiling drops
            # below what the voices alone hold.
            for i in range(5):
                assert await backend.take_token(f"seen-{i}", 1.0, 5) == 0.0
            used = int((await backend._client.info("memory"))["used_memory"])
            await backend._client.config_set("maxmemory", str(used // 2))
            yield server, backend
        finally:
            await backend.close()


@pytest.mark.parametrize("mode", ["open", "closed"])
async def test_a_full_store_refuses_rate_limited_requests_in_either_mode(
    full_store: tuple[RedisServer, RedisStateBackend], mode: str
) -> None:
    _, backend = full_store
    counted: list[str] = []
    limiter = SharedRateLimiter(backend, mode, counted.append)  # type: ignore[arg-type]
    with pytest.raises(StateFull) as refused:
        await limiter.take("a-key-digest", 1.0, 5)
    assert refused.value.status == 503 and refused.value.code == "state_unavailable"
    assert refused.value.headers["Retry-After"].isdigit()
    assert "full" in refused.value.message
    assert counted == ["full"]
    assert backend.up  # full, not down: reads, deletes and speech go on


@pytest.mark.parametrize("mode", ["open", "closed"])
async def test_a_full_store_refuses_new_streams_in_either_mode(
    full_store: tuple[RedisServer, RedisStateBackend], mode: str
) -> None:
    # Not "counted past the ceiling": volatile-lru would evict that lease at once.
    _, backend = full_store
    counted: list[str] = []
    limiter = SharedStreamLimiter(backend, mode, 30.0, counted.append)  # type: ignore[arg-type]
    with pytest.raises(StateFull):
        await limiter.acquire("a-key-digest", 1)
    assert counted == ["full"] and limiter.held() == {}


async def test_through_the_key_check_a_full_store_is_503_not_unlimited(
    full_store: tuple[RedisServer, RedisStateBackend],
) -> None:
    _, backend = full_store
    auth_config = AuthConfig(
        keys=[ApiKeyConfig(name="free-key", sha256=hash_key(KEY), tier="free")],
        tiers={"free": TierConfig(rate_limit_rps=0.01, rate_limit_burst=1, max_concurrent_streams=1)},
    )
    auth = ApiKeyAuth(
        auth_config,
        limiter=SharedRateLimiter(backend, "open"),
        streams=SharedStreamLimiter(backend, "open", 30.0),
    )
    for _ in range(3):  # the old behaviour: every one admitted, limits off
        with pytest.raises(StateUnavailable) as refused:
            await auth.admit(f"Bearer {KEY}")
        assert refused.value.status == 503
    with pytest.raises(StateFull):
        await auth.open_stream(auth.authenticate(f"Bearer {KEY}"))


async def test_room_made_again_lets_limits_work_again(full_store: tuple[RedisServer, RedisStateBackend]) -> None:
    _, backend = full_store
    limiter = SharedRateLimiter(backend, "open")
    with pytest.raises(StateFull):
        await limiter.take("a-key-digest", 1.0, 5)
    await backend._client.config_set("maxmemory", "64mb")  # an operator deleted voices / raised it
    assert await limiter.take("a-key-digest", 1.0, 5) == 0.0


async def test_an_unreachable_store_still_follows_the_failure_mode(tmp_path: Path) -> None:
    """The documented intent of ``open``: a Redis that is away never stops speech."""
    with running_redis(tmp_path / "redis") as server:
        backend = RedisStateBackend(StateConfig(backend="redis", redis_url=server.url, timeout_s=0.5))
        await backend.start()
        try:
            server.kill()
            counted: list[str] = []
            assert await SharedRateLimiter(backend, "open", counted.append).take("k", 1.0, 5) == 0.0
            with pytest.raises(StateUnavailable) as refused:
                await SharedRateLimiter(backend, "closed", counted.append).take("k", 1.0, 5)
            assert not isinstance(refused.value, StateFull)
            assert counted == ["open", "closed"]
        finally:
            await backend.close()


# ---- serve --check: will the voices fit? -----------------------------------------------


def check_config(tmp_path: Path, state: dict[str, object], voices: dict[str, object]) -> Path:
    import yaml

    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"state": {"backend": "redis", **state}, "voices": voices}))
    return path


def test_check_warns_when_max_voices_exceed_the_configured_redis_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.serve import main as serve_main

    state = {"redis_url": "redis://127.0.0.1:1/0", "redis_maxmemory_mb": 768}
    # The default: 1000 voices of up to 10 MiB in 768 MiB.
    assert serve_main(["--config", str(check_config(tmp_path, state, {})), "--check"]) == 0
    err = capsys.readouterr().err
    assert "warning: voices.max_voices" in err and "state.redis_maxmemory_mb" in err and "768 MiB" in err
    # 400 voices of at most 1.5 MiB (30 s of 24 kHz 16-bit mono is 1.4 MB) fit in 691 MiB.
    fits = {"max_voices": 400, "max_upload_bytes": 1_572_864}
    assert serve_main(["--config", str(check_config(tmp_path, state, fits)), "--check"]) == 0
    assert "max_voices" not in capsys.readouterr().err


def test_check_reads_maxmemory_from_a_reachable_redis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.serve import main as serve_main

    with running_redis(tmp_path / "redis", args=["--maxmemory", "64mb"]) as server:
        config = check_config(tmp_path, {"redis_url": server.url}, {"max_voices": 100})
        assert serve_main(["--config", str(config), "--check"]) == 0
    err = capsys.readouterr().err
    assert "warning: voices.max_voices" in err and "of Redis' maxmemory (64 MiB" in err


def test_check_says_when_the_redis_memory_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.serve import main as serve_main

    with running_redis(tmp_path / "redis") as server:  # no maxmemory: unbounded until the OOM killer
        config = check_config(tmp_path, {"redis_url": server.url}, {})
        assert serve_main(["--config", str(config), "--check"]) == 0
    assert "warning: state.redis_maxmemory_mb" in capsys.readouterr().err


def test_check_says_so_when_redis_cannot_be_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.serve import main as serve_main
    from tests.support.procs import free_port

    config = check_config(tmp_path, {"redis_url": f"redis://127.0.0.1:{free_port()}/0"}, {})
    assert serve_main(["--config", str(config), "--check"]) == 0  # a warning, not a failed check
    assert "warning: state.redis_maxmemory_mb" in capsys.readouterr().err
