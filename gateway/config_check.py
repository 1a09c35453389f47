"""``serve --check`` and ``serve --print-config``: the config as the gateway would run it,
judged or shown before anything starts.

The check goes as far as start-up would without opening a port or a process: the config
document (types, ranges, unknown keys), every pool's deploy profile (each pool's routing
prior is read from it), the pool-role rules for the pools the gateway launches itself, and,
with tracing on, that its SDK and exporter are installed.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from gateway.config import ConfigError, GatewayConfig
from gateway.deploy_profile import ProfileError, load_deploy_profile
from gateway.supervisor.profile_check import Finding
from gateway.supervisor.setup import check_supervised_profiles

REDACTED = "**********"
# Worker environment variables whose values are credentials (HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...).
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE", re.IGNORECASE)


def config_findings(config: GatewayConfig) -> list[Finding]:
    """Every problem start-up would meet in the deploy profiles, errors and warnings."""
    findings: list[Finding] = []
    for name, pool in config.pools.items():
        if pool.launch is not None:
            continue  # loaded and checked below, as its workers will run it
        try:
            load_deploy_profile(pool.profile)
        except ProfileError as exc:
            findings.append(Finding(exc.source, exc.key, f"pools.{name.value}.profile: {exc.reason}"))
        except OSError as exc:
            findings.append(Finding(pool.profile, "<file>", f"pools.{name.value}.profile: {exc}"))
    return findings + check_supervised_profiles(config) + tracing_findings(config)


def tracing_findings(config: GatewayConfig) -> list[Finding]:
    """With ``tracing.endpoint`` set: the exporter can be built (the ``tracing`` extra is
    installed). Building it opens no connection."""
    if not config.tracing.enabled:
        return []
    try:
        from gateway.telemetry.otlp import span_exporter

        span_exporter(config.tracing).shutdown()
    except ConfigError as exc:
        return [Finding("config", "tracing.endpoint", str(exc))]
    return []


def redacted(config: GatewayConfig) -> dict[str, Any]:
    """The whole config as plain data, credentials masked: secrets (the admin token, the
    Redis URL with its password) and worker environment values named like credentials.
    API keys are configured as digests, which are not secret."""
    document = config.model_dump(mode="json")  # SecretStr fields come out masked
    for pool in document["pools"].values():
        launch = pool.get("launch")
        if launch:
            launch["env"] = {k: REDACTED if _SECRET_NAME.search(k) else v for k, v in launch["env"].items()}
    return document


def config_yaml(config: GatewayConfig) -> str:
    return yaml.safe_dump(redacted(config), sort_keys=False, default_flow_style=False)
