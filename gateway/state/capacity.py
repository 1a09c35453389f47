"""Will the voices fit in Redis? ``serve --check`` compares the most voices may take
(``voices.max_voices`` x ``voices.max_upload_bytes``: audio is stored as uploaded) with the
share of Redis' ``maxmemory`` they may fill; past it uploads are refused (503) before
``max_voices`` is reached, and an operator should learn that from the check, not from users.
"""

from __future__ import annotations

import asyncio

from redis.exceptions import RedisError

from gateway.config import ConfigError, GatewayConfig
from gateway.state.redis_backend import VOICE_MEMORY_SHARE, connect

MIB = 1024 * 1024


def configured_maxmemory(config: GatewayConfig) -> tuple[int | None, str]:
    """Redis' ceiling in bytes and where it came from; None when neither says."""
    state = config.state
    if state.redis_maxmemory_mb is not None:
        return state.redis_maxmemory_mb * MIB, "state.redis_maxmemory_mb"
    return read_maxmemory(config), "Redis' maxmemory"


def read_maxmemory(config: GatewayConfig) -> int | None:
    """``maxmemory`` from ``INFO memory`` (CONFIG GET is often disabled on managed Redis),
    over the gateway's own connection settings (password, TLS); None when Redis cannot be
    asked or sets none (0). For ``serve --check``, which runs outside any event loop."""

    async def ask() -> int:
        client = connect(config.state, timeout_s=config.state.timeout_s)
        try:
            async with asyncio.timeout(config.state.timeout_s * 4):
                return int((await client.info("memory")).get("maxmemory", 0))
        finally:
            await client.aclose()

    try:
        limit = asyncio.run(ask())
    except (RedisError, OSError, TimeoutError, ValueError, ConfigError):
        return None
    return limit or None


def voice_memory_problem(config: GatewayConfig, maxmemory: int, source: str) -> str | None:
    """Why the configured voices may not fit, or None when they do."""
    worst = config.voices.max_voices * config.voices.max_upload_bytes
    room = int(maxmemory * VOICE_MEMORY_SHARE)
    if worst <= room:
        return None
    fit = room // config.voices.max_upload_bytes
    return (
        f"voices.max_voices ({config.voices.max_voices}) x voices.max_upload_bytes "
        f"({config.voices.max_upload_bytes / MIB:g} MiB) = {worst / MIB:,.0f} MiB, more than the "
        f"{room / MIB:,.0f} MiB voices may use of {source} ({maxmemory / MIB:,.0f} MiB; the rest is "
        f"kept for rate and stream limits): uploads are refused (503) from about {fit} voices of "
        "the largest size on. Lower voices.max_voices or voices.max_upload_bytes, or give Redis more memory."
    )
