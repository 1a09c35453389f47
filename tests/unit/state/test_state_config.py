from __future__ import annotations

from pathlib import Path

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


def test_the_redis_password_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Kubernetes Secret as an env var (secretKeyRef) or a compose variable.
    monkeypatch.setenv("HIGGS_GATEWAY_STATE__REDIS_PASSWORD", "hunter2")
    state = load_config(None, {"state": {"backend": "redis", "redis_url": "redis://redis:6379/0"}}).state
    assert state.redis_password is not None and state.redis_password.get_secret_value() == "hunter2"
    assert "hunter2" not in str(state.model_dump(mode="json"))


def test_the_redis_password_file_must_be_readable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "password"
    monkeypatch.setenv("HIGGS_GATEWAY_STATE__REDIS_PASSWORD_FILE", str(missing))
    with pytest.raises(ConfigError, match=r"state\.redis_password_file: .*cannot read .*password"):
        load_config(None, {"state": {"backend": "redis", "redis_url": "redis://redis:6379/0"}})
    missing.write_text("s3cret\n")
    state = load_config(None, {"state": {"backend": "redis", "redis_url": "redis://redis:6379/0"}}).state
    assert state.redis_password_file == missing


@pytest.mark.parametrize(
    ("url", "extra", "places"),
    [
        ("redis://:inurl@redis:6379/0", {"redis_password": "x"}, "the password in state.redis_url and state.redis_password"),
        ("redis://redis:6379/0?password=inurl", {"redis_password_file": "FILE"}, "the password in state.redis_url and state.redis_password_file"),
        ("redis://redis:6379/0", {"redis_password": "x", "redis_password_file": "FILE"}, "state.redis_password and state.redis_password_file"),
    ],
)
def test_the_redis_password_is_given_once(tmp_path: Path, url: str, extra: dict[str, str], places: str) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("s3cret")
    extra = {k: str(password_file) if v == "FILE" else v for k, v in extra.items()}
    with pytest.raises(ConfigError, match=f"one place only, not in {places}"):
        load_config(None, {"state": {"backend": "redis", "redis_url": url, **extra}})
