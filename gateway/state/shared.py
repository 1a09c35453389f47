"""The seam between the gateway's own stores and the shared state backend.

With ``state.backend: local`` this is a pass-through: the threshold store, the fleet's
drain file and the voice store write the data directory as they always have. With
``redis`` every change is written to Redis first (refused with ``StateUnavailable`` when
it cannot be, so no replica pretends the fleet agrees) and then to this replica's local
copy; changes made through other replicas arrive from the backend's follower and are
applied to the same local stores. Speech only ever reads the local stores, so it keeps
working with the last known state while Redis is away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.config import RoutingConfig, StateConfig
from gateway.deploy_profile import deep_merge
from gateway.pools.fleet import Fleet
from gateway.pools.worker import Worker
from gateway.routing.admission import Admission
from gateway.routing.policy import create_policy
from gateway.routing.thresholds import ThresholdStore
from gateway.state.backend import ChangeKind, StateBackend, StoredVoice
from gateway.state.metrics import StateMetrics
from gateway.state.rate_limit import RateLimiter, SharedRateLimiter
from gateway.voices.names import name_key
from gateway.voices.store import Voice, VoiceStore

log = logging.getLogger(__name__)


def create_backend(config: StateConfig) -> StateBackend | None:
    """The shared backend ``state.backend`` names; None for the local data directory."""
    if config.backend == "local":
        return None
    from gateway.state.redis_backend import RedisStateBackend  # only Redis deployments need it

    return RedisStateBackend(config)


class SharedState:
    def __init__(
        self,
        config: StateConfig,
        backend: StateBackend | None,
        *,
        thresholds: ThresholdStore,
        fleet: Fleet,
        admission: Admission,
        voices: VoiceStore,
        voices_changed: Callable[[], None],
        registry: CollectorRegistry,
    ) -> None:
        self._backend = backend
        self._thresholds = thresholds
        self._fleet = fleet
        self._admission = admission
        self._voices = voices
        self._voices_changed = voices_changed
        self.metrics = StateMetrics(registry, config.backend)
        self.rate_limiter: RateLimiter | None = None
        if backend is not None:
            self.rate_limiter = SharedRateLimiter(
                backend, config.rate_limit_failure_mode, lambda mode: self.metrics.rate_limit_unavailable.labels(mode).inc()
            )
            on_up_change = getattr(backend, "on_up_change", None)
            if on_up_change is not None:
                on_up_change(lambda up: self.metrics.backend_up.set(1 if up else 0))

    async def start(self) -> None:
        if self._backend is None:
            return
        self._voices.set_mirror(_ThreadMirror(self._backend, asyncio.get_running_loop()))
        await self._backend.start(self.apply)
        self.metrics.backend_up.set(1 if self._backend.up else 0)

    async def stop(self) -> None:
        if self._backend is not None:
            await self._backend.close()

    # ---- writes (admin API) ------------------------------------------------------------
    async def update_routing(self, patch: Mapping[str, Any]) -> RoutingConfig:
        """Deep-merge ``patch`` into the overrides every replica applies."""
        if self._backend is None:
            return self._thresholds.update(patch)
        if not isinstance(patch, Mapping):
            return self._thresholds.update(patch)  # raises the usual ThresholdUpdateError

        def merged(stored: dict[str, Any]) -> dict[str, Any]:
            overrides = deep_merge(stored, dict(patch))
            self._thresholds.validated(overrides)  # ThresholdUpdateError: nothing written
            return overrides

        overrides = await self._backend.update_routing(merged)
        self._thresholds.replace_overrides(overrides, persist=False)
        await asyncio.to_thread(self._thresholds.persist)
        return self._thresholds.current()

    async def set_drained(self, worker_id: str, drained: bool) -> Worker:
        if self._backend is not None:
            await self._backend.set_drained(worker_id, drained)
        return self._fleet.set_drained(worker_id, drained)

    # ---- following other replicas --------------------------------------------------------
    async def apply(self, kind: ChangeKind | None) -> None:
        """Bring the local stores in step with the backend (``None``: everything)."""
        if kind is None and not await self._require().initialized():
            # A new Redis, or one restarted without its data: applying it would reset
            # every replica's routing and drop every voice. Keep the last known state;
            # the first replica to get here fills the store from its own copy.
            await self._seed_empty_store()
            return
        if kind in (None, ChangeKind.ROUTING):
            await self._apply_routing()
        if kind in (None, ChangeKind.DRAINS):
            drained = await self._require().read_drains()
            if drained != self._fleet.drained_ids:
                self._fleet.replace_drained(drained)
                self.metrics.changes_applied.labels(ChangeKind.DRAINS.value).inc()
                await asyncio.to_thread(self._fleet.save_drained, frozenset(drained))
        if kind in (None, ChangeKind.VOICES):
            await self._apply_voices()

    async def _apply_routing(self) -> None:
        overrides = await self._require().read_routing()
        if overrides == self._thresholds.overrides():
            return
        before = self._thresholds.current()
        # Applied in memory first: the next decision uses it; the local copy follows.
        changed = self._thresholds.replace_overrides(overrides, persist=False)
        await asyncio.to_thread(self._thresholds.persist)
        if not changed:
            return
        after = self._thresholds.current()
        log.info("routing changed through another replica: %s", after.model_dump())
        if after.policy != before.policy:
            self._admission.set_policy(create_policy(after.policy))
        self._admission.capacity_changed()
        self.metrics.changes_applied.labels(ChangeKind.ROUTING.value).inc()

    async def _apply_voices(self) -> None:
        backend = self._require()
        # Local first, then remote: a voice written here meanwhile is in Redis before it is
        # on disk, so it can look "missing locally" (harmless) but never "deleted remotely".
        local = {name_key(v.name): v for v in self._voices.list()}
        metas = await backend.voice_metas()
        changed = False
        for key, meta in metas.items():
            try:
                voice = Voice.from_meta(meta)
            except (ValueError, TypeError) as exc:
                log.warning("ignoring unusable voice %r in the shared store: %s", key, exc)
                continue
            if local.get(key) == voice:
                continue
            stored = await backend.read_voice(voice.name)
            if stored is not None:
                changed |= await asyncio.to_thread(self._voices.install, Voice.from_meta(stored.meta), stored.audio)
        for key, voice in local.items():
            if key not in metas:
                changed |= await asyncio.to_thread(self._voices.discard, voice.name)
        if changed:
            self.metrics.changes_applied.labels(ChangeKind.VOICES.value).inc()
            self._voices_changed()

    async def _seed_empty_store(self) -> None:
        backend = self._require()
        if not await backend.claim_seeding():
            return  # another replica is filling it; its "all" message brings us back
        log.warning("the shared state store is empty; filling it from this replica's copy")
        await backend.replace_routing(self._thresholds.overrides())
        for worker_id in sorted(self._fleet.drained_ids):
            await backend.set_drained(worker_id, True)
        for voice in self._voices.list():
            audio = await asyncio.to_thread(self._voices.read_audio, voice)
            await backend.put_voice(StoredVoice(voice.to_meta(), audio))
        await backend.mark_initialized()

    def _require(self) -> StateBackend:
        assert self._backend is not None
        return self._backend


class _ThreadMirror:
    """The voice store writes on a worker thread; the backend's client lives on the loop."""

    def __init__(self, backend: StateBackend, loop: asyncio.AbstractEventLoop) -> None:
        self._backend = backend
        self._loop = loop

    def put(self, voice: Voice, audio: bytes) -> bool:
        stored = StoredVoice(voice.to_meta(), audio)
        return asyncio.run_coroutine_threadsafe(self._backend.put_voice(stored), self._loop).result()

    def delete(self, name: str) -> dict[str, Any] | None:
        return asyncio.run_coroutine_threadsafe(self._backend.delete_voice(name), self._loop).result()

