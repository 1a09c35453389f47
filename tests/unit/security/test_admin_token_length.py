"""Security, the admin token: one that can be guessed is refused when the config is read."""

from __future__ import annotations

import pytest

from gateway.config import MIN_ADMIN_TOKEN_CHARS, AuthConfig, ConfigError, load_config


def test_a_short_admin_token_is_refused_with_what_to_do() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(overrides={"auth": {"admin_token": "hunter2"}})
    message = str(refused.value)
    assert "auth.admin_token" in message and f"at least {MIN_ADMIN_TOKEN_CHARS}" in message
    assert "hunter2" not in message  # not even a rejected token is echoed


def test_long_tokens_and_no_token_are_fine() -> None:
    assert AuthConfig(admin_token="x" * MIN_ADMIN_TOKEN_CHARS).admin_token is not None
    assert AuthConfig(admin_token=None).admin_token is None
    assert AuthConfig(admin_token="").admin_token is not None  # empty = admin off (AdminAuth)


def test_the_environment_variable_is_held_to_it_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIGGS_GATEWAY_ADMIN_TOKEN", "short")
    with pytest.raises(ConfigError):
        load_config()
