"""The typed contract every state backend keeps, and what a change notification says.

Routing overrides are an opaque document here (a dict validated by the routing layer
before it is written), so new routing knobs need no change in any backend.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from gateway.voices.owners import ADMIN, worker_name


class ChangeKind(StrEnum):
    ROUTING = "routing"
    DRAINS = "drains"
    VOICES = "voices"


# Called with the kind that changed, or None for "re-read everything" (a reconnect,
# the periodic safety net).
ChangeListener = Callable[[ChangeKind | None], Awaitable[None]]
# Given the stored overrides, returns the overrides to store (raises to refuse).
RoutingUpdate = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class StoredVoice:
    meta: dict[str, Any]  # Voice.to_meta(): name, owner, format, sizes, consent, ...
    audio: bytes  # the reference audio as validated at upload

    @property
    def worker_name(self) -> str:
        """What the voice is stored under: unique across owners (``gateway.voices.owners``)."""
        return worker_name(str(self.meta.get("owner", ADMIN)), str(self.meta["name"]))


class StateBackend(Protocol):
    """Reads and writes raise ``StateUnavailable`` when the store cannot be reached."""

    name: str

    @property
    def up(self) -> bool: ...

    async def start(self, on_change: ChangeListener | None = None) -> None: ...

    async def close(self) -> None: ...

    async def initialized(self) -> bool:
        """False for an empty store (new, or restarted without its data)."""
        ...

    async def claim_seeding(self) -> bool:
        """True for the one caller (for a while) that should fill an empty store."""
        ...

    async def mark_initialized(self) -> None: ...

    async def read_routing(self) -> dict[str, Any]: ...

    async def update_routing(self, update: RoutingUpdate) -> dict[str, Any]: ...

    async def replace_routing(self, overrides: dict[str, Any]) -> None: ...

    async def read_drains(self) -> set[str]: ...

    async def set_drained(self, worker_id: str, drained: bool) -> None: ...

    async def voice_metas(self) -> dict[str, dict[str, Any]]: ...

    # Voices are keyed by their worker name (lower case in ``voice_metas``), not their own.
    async def read_voice(self, name: str) -> StoredVoice | None: ...

    async def put_voice(self, voice: StoredVoice) -> bool: ...

    async def delete_voice(self, name: str) -> dict[str, Any] | None: ...

    async def take_token(self, key: str, rate: float, burst: int) -> float: ...

    async def acquire_stream(self, key: str, limit: int, holder: str, ttl_s: float) -> bool:
        """Take one of ``key``'s ``limit`` stream slots as ``holder``'s lease; False when all are held."""
        ...

    async def release_stream(self, key: str, holder: str) -> None: ...

    async def renew_streams(self, leases: Sequence[tuple[str, str]], ttl_s: float) -> None:
        """Extend the (key, holder) leases still held by ``ttl_s`` from now."""
        ...
