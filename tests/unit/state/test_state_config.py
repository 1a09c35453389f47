from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_config


def test_local_is_the_default() -> None:
    assert load_config(None).state.backend == "local"


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"backend": "redis"}, "state.redis_url is required"),
        ({"backend": "redis", "redis_url": "http://redis:6379"}, "redis://, rediss://"),
        ({"backend": "memcached"}, "state.backend"),
        ({"backend": "local", "redis_host": "x"}, "state.redis_host"),
        ({"rate_limit_failure_mode": "maybe"}, "state.rate_limit_failure_mode"),
    ],
)
def test_bad_state_settings_name_the_key(state: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("/", "/")):
        load_config(None, {"state": state})


def test_the_redis_url_is_a_secret() -> None:
    config = load_config(None, {"state": {"backend": "redis", "redis_url": "rediss://:hunter2@redis:6380/1"}})
    assert "hunter2" not in str(config.model_dump(mode="json"))
    assert config.state.redis_url is not None and config.state.redis_url.get_secret_value().endswith("/1")
