"""Is this gateway about to serve ``/v1`` without API keys to more than this machine?

Loopback with no keys is the demo and a developer's laptop; any other address with no keys
lets everyone who can reach it spend the GPUs, so start-up refuses it unless
``auth.allow_anonymous: true`` says it is meant (``serve --check`` reports it too).
"""

from __future__ import annotations

import ipaddress

from gateway.config import GatewayConfig

ALLOW_SETTING = "auth.allow_anonymous"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``; a wildcard (0.0.0.0, ::, '') or any other name is not."""
    if host.strip().lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def anonymous_exposure(config: GatewayConfig) -> str | None:
    """Why this config serves ``/v1`` openly beyond loopback, or None when it does not."""
    host = config.server.host
    if config.auth.keys_configured or is_loopback(host):
        return None
    return (
        f"server.host is {host!r}, not a loopback address, and no API keys are configured "
        "(auth.api_key_sha256 or auth.keys): anyone who reaches it could use /v1. Configure keys, "
        f"serve on 127.0.0.1, or set {ALLOW_SETTING}: true to serve without keys on purpose"
    )


def refuse_anonymous_exposure(config: GatewayConfig) -> str | None:
    """The start-up refusal, or None: ``allow_anonymous`` turns it into a choice."""
    return None if config.auth.allow_anonymous else anonymous_exposure(config)
