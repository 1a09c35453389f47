"""How the Redis client is built from the settings (no connection is made here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio.connection import Connection, SSLConnection

from gateway.config import ConfigError, StateConfig
from gateway.state.redis_backend import connect


def test_rediss_uses_tls_with_the_password_and_ca() -> None:
    config = StateConfig(
        backend="redis", redis_url="rediss://:s3cret@redis.example:6380/2", tls_ca_file="/etc/ca.pem", timeout_s=0.25
    )
    pool = connect(config, timeout_s=config.timeout_s).connection_pool
    assert pool.connection_class is SSLConnection
    kwargs = pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"], kwargs["password"]) == ("redis.example", 6380, 2, "s3cret")
    assert kwargs["ssl_cert_reqs"] == "required" and kwargs["ssl_ca_certs"] == "/etc/ca.pem"
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 0.25


def test_plain_redis_and_an_unverified_tls_server() -> None:
    plain = connect(StateConfig(backend="redis", redis_url="redis://127.0.0.1:6379/0"), timeout_s=None).connection_pool
    assert plain.connection_class is Connection and plain.connection_kwargs["socket_timeout"] is None
    config = StateConfig(backend="redis", redis_url="rediss://redis:6380/0", tls_verify=False)
    assert connect(config, timeout_s=1.0).connection_pool.connection_kwargs["ssl_cert_reqs"] == "none"


def test_a_password_kept_out_of_the_url_is_sent() -> None:
    config = StateConfig(backend="redis", redis_url="redis://redis:6379/0", redis_password="hunter2")
    assert connect(config, timeout_s=1.0).connection_pool.connection_kwargs["password"] == "hunter2"
    # An ACL user named in the URL keeps its name; the password comes from the setting.
    config = StateConfig(backend="redis", redis_url="redis://gateway@redis:6379/0", redis_password="hunter2")
    kwargs = connect(config, timeout_s=1.0).connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == ("gateway", "hunter2")


def test_a_password_file_is_read_on_every_connect(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("first\n")  # the newline `echo` or an editor leaves is no part of it
    config = StateConfig(backend="redis", redis_url="redis://redis:6379/0", redis_password_file=secret)
    assert connect(config, timeout_s=1.0).connection_pool.connection_kwargs["password"] == "first"
    secret.write_text("rotated")  # a rotated Secret: the next client uses it
    assert connect(config, timeout_s=1.0).connection_pool.connection_kwargs["password"] == "rotated"
    secret.unlink()
    with pytest.raises(ConfigError, match="state.redis_password_file: cannot read"):
        connect(config, timeout_s=1.0)


def test_no_password_anywhere_sends_none() -> None:
    config = StateConfig(backend="redis", redis_url="redis://redis:6379/0")
    assert connect(config, timeout_s=1.0).connection_pool.connection_kwargs.get("password") is None
