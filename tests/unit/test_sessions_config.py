"""The two session caps keep distinct names: per key (``auth.tiers.*.max_sessions``, 429)
and per replica (``sessions.max_open_per_replica``, 503)."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_config


def test_the_replica_cap_is_max_open_per_replica_and_the_per_key_cap_stays_on_the_tier() -> None:
    config = load_config(
        overrides={
            "sessions": {"max_open_per_replica": 3},
            "auth": {"tiers": {"free": {"max_sessions": 1}}},
        }
    )
    assert config.sessions.max_open_per_replica == 3
    assert config.auth.tier("free").max_sessions == 1
    assert load_config().sessions.max_open_per_replica is None  # unlimited by default


def test_the_old_replica_key_is_refused_rather_than_silently_ignored() -> None:
    with pytest.raises(ConfigError, match="max_sessions"):
        load_config(overrides={"sessions": {"max_sessions": 3}})
