"""An in-memory state backend with a switch for "unreachable"."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from gateway.state.backend import ChangeListener, RoutingUpdate, StoredVoice
from gateway.state.errors import StateUnavailable
from gateway.voices.names import name_key


class FakeBackend:
    name = "fake"

    def __init__(self, initialized: bool = True) -> None:
        self.reachable = True
        self.is_initialized = initialized
        self.routing: dict[str, Any] = {}
        self.drained: set[str] = set()
        self.voices: dict[str, StoredVoice] = {}
        self.tokens: dict[str, int] = {}
        self.streams: dict[str, set[str]] = {}  # key -> holders (leases never expire here)
        self.renewed: list[tuple[str, str]] = []
        self.on_change: ChangeListener | None = None

    @property
    def up(self) -> bool:
        return self.reachable

    def _check(self) -> None:
        if not self.reachable:
            raise StateUnavailable()

    async def start(self, on_change: ChangeListener | None = None) -> None:
        self.on_change = on_change

    async def close(self) -> None:
        return None

    async def initialized(self) -> bool:
        self._check()
        return self.is_initialized

    async def claim_seeding(self) -> bool:
        self._check()
        return True

    async def mark_initialized(self) -> None:
        self._check()
        self.is_initialized = True

    async def read_routing(self) -> dict[str, Any]:
        self._check()
        return copy.deepcopy(self.routing)

    async def update_routing(self, update: RoutingUpdate) -> dict[str, Any]:
        self._check()
        self.routing = update(copy.deepcopy(self.routing))
        return copy.deepcopy(self.routing)

    async def replace_routing(self, overrides: dict[str, Any]) -> None:
        self._check()
        self.routing = copy.deepcopy(overrides)

    async def read_drains(self) -> set[str]:
        self._check()
        return set(self.drained)

    async def set_drained(self, worker_id: str, drained: bool) -> None:
        self._check()
        (self.drained.add if drained else self.drained.discard)(worker_id)

    async def voice_metas(self) -> dict[str, dict[str, Any]]:
        self._check()
        return {key: dict(v.meta) for key, v in self.voices.items()}

    async def read_voice(self, name: str) -> StoredVoice | None:
        self._check()
        return self.voices.get(name_key(name))

    async def put_voice(self, voice: StoredVoice) -> bool:
        self._check()
        key = name_key(voice.meta["name"])
        if key in self.voices:
            return False
        self.voices[key] = voice
        return True

    async def delete_voice(self, name: str) -> dict[str, Any] | None:
        self._check()
        voice = self.voices.pop(name_key(name), None)
        return None if voice is None else dict(voice.meta)

    async def take_token(self, key: str, rate: float, burst: int) -> float:
        self._check()
        self.tokens[key] = self.tokens.get(key, burst) - 1
        return 0.0 if self.tokens[key] >= 0 else 1.0 / rate


    async def acquire_stream(self, key: str, limit: int, holder: str, ttl_s: float) -> bool:
        self._check()
        holders = self.streams.setdefault(key, set())
        if len(holders) >= limit:
            return False
        holders.add(holder)
        return True

    async def release_stream(self, key: str, holder: str) -> None:
        self._check()
        self.streams.get(key, set()).discard(holder)

    async def renew_streams(self, leases: Sequence[tuple[str, str]], ttl_s: float) -> None:
        self._check()
        self.renewed.extend(leases)


class FakeFleet:
    """Only what the drain seam tells the fleet."""

    def __init__(self) -> None:
        self.drained_ids: frozenset[str] = frozenset()

    def set_drained(self, worker_id: str, drained: bool) -> str:
        ids = set(self.drained_ids)
        (ids.add if drained else ids.discard)(worker_id)
        self.drained_ids = frozenset(ids)
        return worker_id

    def apply_drained(self, worker_ids: frozenset[str]) -> None:
        self.drained_ids = frozenset(worker_ids)


class FakeAdmission:
    def __init__(self) -> None:
        self.policies: list[str] = []
        self.capacity_changes = 0

    def set_policy(self, policy: object) -> None:
        self.policies.append(type(policy).__name__)

    def capacity_changed(self) -> None:
        self.capacity_changes += 1
