"""``serve --check`` and ``serve --print-config``: the config as the gateway would run it,
judged or shown before anything starts.

The check goes as far as start-up would without opening a port or a process: the config
document (types, ranges, unknown keys), every pool's deploy profile (each pool's routing
prior is read from it), the pool-role rules for the pools the gateway launches itself, and,
with tracing on, that its SDK and exporter are installed, and with ``quality.wer`` on, that the
recogniser extra is. It also warns where the config
is unsafe or cannot hold: no API keys on a non-loopback address (an error unless
``auth.allow_anonymous``), and more voice audio than the Redis it names may hold.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from gateway.config import ConfigError, GatewayConfig
from gateway.worker.profile import ProfileError, load_deploy_profile
from gateway.security.exposure import anonymous_exposure
from gateway.supervisor.profile_check import Finding, Severity
from gateway.supervisor.setup import check_supervised_profiles

REDACTED = "**********"
# Worker environment variables whose values are credentials (HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...).
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE", re.IGNORECASE)
# Command-line options whose value is a credential (--api-key, --hf-token, --password), not
# ones that merely mention tokens (--max-num-batched-tokens).
_SECRET_FLAG = re.compile(r"(?:^|_)(?:token|api_?key|password|passwd|secret|credentials?|private_key)$", re.IGNORECASE)
# The password in a URL's userinfo: ``scheme://user:<password>@``.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:)[^/@\s]*@")


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
    return (
        findings + check_supervised_profiles(config) + tracing_findings(config) + wer_findings(config)
        + exposure_findings(config) + redis_memory_findings(config)
    )  # fmt: skip


def exposure_findings(config: GatewayConfig) -> list[Finding]:
    """No API keys on a non-loopback address: an error (start-up refuses it) unless
    ``auth.allow_anonymous`` says so, then a warning."""
    problem = anonymous_exposure(config)
    if problem is None:
        return []
    if config.auth.allow_anonymous:
        reason = f"{problem}; auth.allow_anonymous is true, so anyone who reaches it uses the GPUs"
        return [Finding("config", "auth.allow_anonymous", reason, Severity.WARNING)]
    return [Finding("config", "auth.allow_anonymous", problem)]


def redis_memory_findings(config: GatewayConfig) -> list[Finding]:
    """With Redis: the most voice audio the config admits fits in its memory (a warning)."""
    if config.state.backend != "redis":
        return []
    from gateway.state.capacity import configured_maxmemory, voice_memory_problem  # Redis deployments only

    maxmemory, source = configured_maxmemory(config)
    if maxmemory is None:
        reason = (
            "Redis' maxmemory is unknown (not reachable, or none set): set state.redis_maxmemory_mb "
            "to check that voices.max_voices x voices.max_upload_bytes fits"
        )
        return [Finding("config", "state.redis_maxmemory_mb", reason, Severity.WARNING)]
    problem = voice_memory_problem(config, maxmemory, source)
    return [] if problem is None else [Finding("config", "voices.max_voices", problem, Severity.WARNING)]


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


def wer_findings(config: GatewayConfig) -> list[Finding]:
    """With ``quality.wer.enabled``: the recogniser extra is installed (an error: start-up
    refuses a word error rate it cannot measure, as it refuses tracing it cannot export)."""
    if not (config.quality.enabled and config.quality.wer.enabled):
        return []
    from gateway.quality.recogniser import missing_extra  # finds the packages, imports neither

    missing = missing_extra()
    return [] if missing is None else [Finding("config", "quality.wer.enabled", missing)]


def redacted(config: GatewayConfig) -> dict[str, Any]:
    """The whole config as plain data, credentials masked: secrets (the admin token, the
    Redis URL with its password), worker environment values named like credentials, the
    password of any URL (worker URLs, ``tracing.endpoint``) and the value of any
    credential-looking option in a command line (``launch.command``). API keys are
    configured as digests, which are not secret."""
    document = config.model_dump(mode="json")  # SecretStr fields come out masked
    for pool in document["pools"].values():
        launch = pool.get("launch")
        if launch:
            launch["env"] = {k: REDACTED if _SECRET_NAME.search(k) else v for k, v in launch["env"].items()}
    masked: dict[str, Any] = _masked(document)
    return masked


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return _masked_args(value)
    if isinstance(value, str):
        return _masked_url(value)
    return value


def _masked_args(items: list[Any]) -> list[Any]:
    """A list, with the value after ``--api-key``/``--token``/... and of ``--token=...`` masked."""
    out: list[Any] = []
    secret_next = False
    for item in items:
        if secret_next and isinstance(item, str) and not item.startswith("-"):
            out.append(REDACTED)
            secret_next = False
            continue
        secret_next = False
        flag, equals, _ = item.partition("=") if isinstance(item, str) else ("", "", "")
        if flag.startswith("-") and _SECRET_FLAG.search(flag.lstrip("-").replace("-", "_")):
            if equals:
                out.append(f"{flag}={REDACTED}")
                continue
            secret_next = True
        out.append(_masked(item))
    return out


def _masked_url(text: str) -> str:
    """``scheme://user:password@host...`` with the password masked (the user kept: it says which)."""
    return _URL_PASSWORD.sub(rf"\g<1>{REDACTED}@", text) if "@" in text else text


def config_yaml(config: GatewayConfig) -> str:
    return yaml.safe_dump(redacted(config), sort_keys=False, default_flow_style=False)
