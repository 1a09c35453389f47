"""Redis run as the manifests run it (docker/k8s/base/redis.yaml): a password the gateway
reads from a mounted file, and a memory ceiling with the manifests' eviction policy. What a
full Redis drops, what it refuses, and what the gateway tells its callers then."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gateway.config import StateConfig
from gateway.state.backend import StoredVoice
from gateway.state.errors import StateUnavailable
from gateway.state.redis_backend import RedisStateBackend
from tests.support.redis_server import RedisServer, running_redis

REPO = Path(__file__).resolve().parents[2]
META = {
    "name": "Voice", "created_at": 1, "mime_type": "audio/wav", "ext": "wav", "file_size": 4,
    "duration_s": 1.0, "sample_rate": 24000, "channels": 1, "consent": "true",
    "ref_text": None, "speaker_description": None,
}  # fmt: skip
VOICE_BYTES = 100_000  # a few seconds of reference audio


def manifest_redis_args() -> list[str]:
    for doc in yaml.safe_load_all((REPO / "docker/k8s/base/redis.yaml").read_text()):
        if doc["kind"] == "Deployment":
            return [str(a) for a in doc["spec"]["template"]["spec"]["containers"][0]["args"]]
    raise AssertionError("no Redis Deployment in redis.yaml")


def manifest_option(name: str) -> str:
    args = manifest_redis_args()
    return args[args.index(name) + 1]


@pytest.fixture()
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret" / "password"
    path.parent.mkdir()
    path.write_text("correct-horse-battery\n")  # as a Secret created from a file often is
    return path


def test_the_manifests_policy_and_ceiling() -> None:
    # What the test below runs with, small: the production ceiling is the manifest's.
    assert manifest_option("--maxmemory-policy") == "volatile-lru"
    assert manifest_option("--maxmemory") == "768mb"
    assert manifest_option("--requirepass") == "$(REDIS_PASSWORD)"


async def test_the_gateway_authenticates_with_the_password_file(tmp_path: Path, password_file: Path) -> None:
    with running_redis(tmp_path / "redis", password="correct-horse-battery") as server:
        url = server.url
        authenticated = RedisStateBackend(StateConfig(backend="redis", redis_url=url, redis_password_file=password_file))
        anonymous = RedisStateBackend(StateConfig(backend="redis", redis_url=url))
        try:
            await authenticated.start()
            assert authenticated.up
            assert await authenticated.put_voice(StoredVoice(META, b"RIFF"))
            await anonymous.start()
            assert not anonymous.up  # NOAUTH: the store is unusable without the password
            with pytest.raises(StateUnavailable):
                await anonymous.read_voice("Voice")
        finally:
            await authenticated.close()
            await anonymous.close()


@pytest.fixture()
def full_redis(tmp_path: Path) -> Iterator[RedisServer]:
    args = ["--maxmemory", "4mb", "--maxmemory-policy", manifest_option("--maxmemory-policy")]
    with running_redis(tmp_path / "redis", args=args) as server:
        yield server


async def test_a_full_redis_keeps_room_for_limits_drops_no_voice_and_refuses_cleanly(full_redis: RedisServer) -> None:
    backend = RedisStateBackend(StateConfig(backend="redis", redis_url=full_redis.url))
    try:
        await backend.start()
        await backend.set_drained("worker-1", True)
        await backend.replace_routing({"thresholds": {"ttfp": 1}})
        # Buckets of 300 keys that have been seen (burst 5 at a slow refill: long TTLs).
        for i in range(300):
            assert await backend.take_token(f"key-{i}", 0.001, 5) == 0.0
        stored: list[str] = []
        with pytest.raises(StateUnavailable, match="full") as refused:
            for i in range(200):
                name = f"voice-{i}"
                assert await backend.put_voice(StoredVoice({**META, "name": name}, bytes([i]) * VOICE_BYTES))
                stored.append(name)
        assert refused.value.status == 503 and refused.value.code == "state_unavailable"
        assert backend.up  # full is not down: the rate limiter keeps using it

        info = await backend._client.info("stats")
        # Voices stop short of the ceiling: the limits' buckets keep their room...
        assert info["evicted_keys"] == 0
        buckets = await backend._client.keys("higgs-gateway:ratelimit:*")
        assert len(buckets) == 300
        # ...and nothing without a TTL was dropped.
        assert len(stored) > 10
        assert sorted(await backend.voice_metas()) == sorted(stored)
        for name in stored:
            voice = await backend.read_voice(name)
            assert voice is not None and len(voice.audio) == VOICE_BYTES
        assert await backend.read_drains() == {"worker-1"}
        assert await backend.read_routing() == {"thresholds": {"ttfp": 1}}
        # The refused voice left nothing behind; deleting some makes room again (the last
        # accepted write may have overshot the ceiling by up to one voice).
        assert await backend.read_voice(f"voice-{len(stored)}") is None
        for name in stored[:3]:
            assert await backend.delete_voice(name) is not None
        assert await backend.put_voice(StoredVoice({**META, "name": "after"}, b"\x01" * (VOICE_BYTES // 2)))
    finally:
        await backend.close()
