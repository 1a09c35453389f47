"""The data directory as a state backend: today's files, read and written in place.

``routing.json`` (the overrides), ``drained.json`` (drained worker ids) and ``voices/``
(one directory per voice) are the formats the gateway has always kept. Replicas sharing
one directory follow each other by polling it (the gateway's upkeep loop); this class
adds no notifications. The migration command and tests use it to read and write a data
directory through the same contract as Redis.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.atomic import write_atomically
from gateway.config import VoicesConfig
from gateway.pools.drains import DRAIN_FILE
from gateway.routing.thresholds import ROUTING_STATE_FILE
from gateway.state.backend import ChangeListener, RoutingUpdate, StoredVoice
from gateway.state.rate_limit import TokenBuckets
from gateway.voices.store import Voice, VoiceStore

_ROUTING_FORMAT_VERSION = 1


class LocalStateBackend:
    name = "local"

    def __init__(self, data_dir: Path, voices: VoicesConfig | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._dir = Path(data_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._voices = VoiceStore.in_data_dir(self._dir, voices)
        self._buckets = TokenBuckets(clock)
        self._streams: dict[str, set[str]] = {}  # key -> holders (one process: nothing expires)

    @property
    def up(self) -> bool:
        return True  # a local disk that fails fails the whole gateway, not just its state

    async def start(self, on_change: ChangeListener | None = None) -> None:
        return None

    async def close(self) -> None:
        return None

    async def initialized(self) -> bool:
        return True

    async def claim_seeding(self) -> bool:
        return False

    async def mark_initialized(self) -> None:
        return None

    # ---- routing ---------------------------------------------------------------------
    async def read_routing(self) -> dict[str, Any]:
        path = self._dir / ROUTING_STATE_FILE
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        overrides = document.get("overrides", {}) if isinstance(document, dict) else {}
        return overrides if isinstance(overrides, dict) else {}

    async def update_routing(self, update: RoutingUpdate) -> dict[str, Any]:
        overrides = update(await self.read_routing())
        await self.replace_routing(overrides)
        return overrides

    async def replace_routing(self, overrides: dict[str, Any]) -> None:
        document = {"version": _ROUTING_FORMAT_VERSION, "overrides": overrides}
        await asyncio.to_thread(write_atomically, self._dir / ROUTING_STATE_FILE, json.dumps(document, indent=2))

    # ---- drains ----------------------------------------------------------------------
    async def read_drains(self) -> set[str]:
        try:
            ids = json.loads((self._dir / DRAIN_FILE).read_text())
        except FileNotFoundError:
            return set()
        return {str(i) for i in ids} if isinstance(ids, list) else set()

    async def set_drained(self, worker_id: str, drained: bool) -> None:
        ids = await self.read_drains()
        ids = ids | {worker_id} if drained else ids - {worker_id}
        await asyncio.to_thread(write_atomically, self._dir / DRAIN_FILE, json.dumps(sorted(ids)))

    # ---- voices ----------------------------------------------------------------------
    async def voice_metas(self) -> dict[str, dict[str, Any]]:
        return {v.worker_name.lower(): v.to_meta() for v in self._voices.list()}

    async def read_voice(self, name: str) -> StoredVoice | None:
        voice = self._voices.get(name)
        if voice is None:
            return None
        audio = await asyncio.to_thread(self._voices.read_audio, voice)
        return StoredVoice(voice.to_meta(), audio)

    async def put_voice(self, voice: StoredVoice) -> bool:
        if self._voices.get(voice.worker_name) is not None:
            return False
        await asyncio.to_thread(self._voices.install, Voice.from_meta(voice.meta), voice.audio)
        return True

    async def delete_voice(self, name: str) -> dict[str, Any] | None:
        voice = await asyncio.to_thread(self._voices.delete, name)
        return None if voice is None else voice.to_meta()

    # ---- rate limits -----------------------------------------------------------------
    async def take_token(self, key: str, rate: float, burst: int) -> float:
        return self._buckets.take(key, rate, burst)

    # ---- stream limits ---------------------------------------------------------------
    async def acquire_stream(self, key: str, limit: int, holder: str, ttl_s: float) -> bool:
        holders = self._streams.setdefault(key, set())
        if len(holders) >= limit:
            return False
        holders.add(holder)
        return True

    async def release_stream(self, key: str, holder: str) -> None:
        holders = self._streams.get(key, set())
        holders.discard(holder)
        if not holders:
            self._streams.pop(key, None)

    async def renew_streams(self, leases: Sequence[tuple[str, str]], ttl_s: float) -> None:
        return None
