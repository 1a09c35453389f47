"""The seam between the gateway's own stores and the shared state backend.

With ``state.backend: local`` there is no backend: the threshold, drain and voice stores
write the data directory as they always have. With ``redis`` the composition root hands
the backend to those stores as their *mirror* (``RoutingControl``, ``DrainStore``,
``VoiceStore``): every change is written to Redis first (refused with
``StateUnavailable`` when it cannot be, so no replica pretends the fleet agrees) and then
to this replica's local copy. This class follows the changes made through other
replicas (the backend's pub/sub messages and periodic re-read) and applies them to the
same local stores; it also owns the backend's start and stop, the fleet-wide rate and
concurrent-stream limiters, and tells the recorder (``StateObserver``) what its metrics count. Speech only ever reads the local stores, so it keeps
working with the last known state while Redis is away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gateway.config import StateConfig
from gateway.pools.drains import DrainStore
from gateway.pools.events import FleetEvents
from gateway.pools.worker import Worker
from gateway.routing.control import RoutingControl
from gateway.routing.thresholds import ThresholdStore
from gateway.state.backend import ChangeKind, StateBackend, StoredVoice
from gateway.state.errors import StateUnavailable
from gateway.state.inflight import SharedInflight, Workers
from gateway.state.rate_limit import RateLimiter, SharedRateLimiter
from gateway.state.stream_limit import SharedStreamLimiter
from gateway.voices.names import name_key
from gateway.voices.store import Voice, VoiceStore

log = logging.getLogger(__name__)


class DrainFollower(Protocol):
    """Applies the drained set other replicas wrote (the fleet's ``Membership``)."""

    def apply_drained(self, drained_ids: Iterable[str]) -> None: ...


class StateObserver(Protocol):
    """What the shared state reports (the recorder turns it into ``higgs_gateway_state_*``)."""

    def state_backend_up(self, backend: str, up: bool) -> None: ...

    def state_rate_limit_unavailable(self, mode: str) -> None: ...

    def state_change_applied(self, kind: str) -> None: ...


def shares_inflight(config: StateConfig) -> bool:
    """Replicas count each other's leases (a shared backend with ``share_inflight``)."""
    return config.backend != "local" and config.share_inflight


def create_shared_inflight(
    config: StateConfig,
    members: Workers,
    events: FleetEvents,
    cap_of: Callable[[Worker], int],
    on_shared: Callable[[bool], None],
) -> SharedInflight | None:
    """The fleet view of in-flight work other replicas share; None for one replica (local)."""
    if not shares_inflight(config):
        return None
    from gateway.state.inflight_redis import RedisInflightStore  # only Redis deployments need it

    return SharedInflight(
        RedisInflightStore(config),
        members,
        events,
        cap_of=cap_of,
        lease_ttl_s=config.inflight_lease_ttl_s,
        timeout_s=config.inflight_timeout_s,
        heartbeat_timeout_s=config.timeout_s,
        on_shared=on_shared,
        max_backoff_s=config.reconnect_max_backoff_s,
    )


def create_backend(config: StateConfig) -> StateBackend | None:
    """The shared backend ``state.backend`` names; None for the local data directory."""
    if config.backend == "local":
        return None
    from gateway.state.redis_backend import RedisStateBackend  # only Redis deployments need it

    return RedisStateBackend(config)


class VoiceMirrorOnLoop:
    """The voice store's mirror: it writes on a worker thread, the backend's client lives on
    the event loop (known once the gateway starts)."""

    def __init__(self, backend: StateBackend) -> None:
        self._backend = backend
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def put(self, voice: Voice, audio: bytes) -> bool:
        stored = StoredVoice(voice.to_meta(), audio)
        return asyncio.run_coroutine_threadsafe(self._backend.put_voice(stored), self._running_loop()).result()

    def delete(self, name: str) -> dict[str, Any] | None:
        return asyncio.run_coroutine_threadsafe(self._backend.delete_voice(name), self._running_loop()).result()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise StateUnavailable("The shared state store is not connected yet; retry shortly.")
        return self._loop


class SharedState:
    def __init__(
        self,
        config: StateConfig,
        backend: StateBackend | None,
        *,
        routing: RoutingControl,
        thresholds: ThresholdStore,
        drains: DrainStore,
        fleet: DrainFollower,
        voices: VoiceStore,
        voice_mirror: VoiceMirrorOnLoop | None,
        voices_changed: Callable[[], None],
        observer: StateObserver,
        inflight: SharedInflight | None = None,
    ) -> None:
        self._backend = backend
        self._inflight = inflight
        self._routing = routing
        self._thresholds = thresholds
        self._drains = drains
        self._fleet = fleet
        self._voices = voices
        self._voice_mirror = voice_mirror
        self._voices_changed = voices_changed
        self._observer = observer
        name = config.backend
        observer.state_backend_up(name, backend is None)  # a shared store counts as down until it answers
        self.rate_limiter: RateLimiter | None = None
        self.stream_limiter: SharedStreamLimiter | None = None
        if backend is not None:
            self.rate_limiter = SharedRateLimiter(backend, config.rate_limit_failure_mode, observer.state_rate_limit_unavailable)
            self.stream_limiter = SharedStreamLimiter(
                backend, config.rate_limit_failure_mode, config.stream_lease_ttl_s, observer.state_rate_limit_unavailable
            )
            on_up_change = getattr(backend, "on_up_change", None)
            if on_up_change is not None:
                on_up_change(lambda up: observer.state_backend_up(name, up))
        self._name = name

    async def start(self) -> None:
        if self._backend is None:
            return
        if self._voice_mirror is not None:
            self._voice_mirror.attach(asyncio.get_running_loop())
        await self._backend.start(self.apply)
        self._observer.state_backend_up(self._name, self._backend.up)
        if self.stream_limiter is not None:
            self.stream_limiter.start()
        if self._inflight is not None:
            self._inflight.start()

    async def stop(self) -> None:
        if self._inflight is not None:
            await self._inflight.stop()
        if self.stream_limiter is not None:
            await self.stream_limiter.stop()
        if self._backend is not None:
            await self._backend.close()

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
            # The whole document, applied as the operator's patch would be: new keys
            # (thresholds, learning) need nothing here.
            if await self._routing.follow_shared(await self._require().read_routing()):
                self._observer.state_change_applied(ChangeKind.ROUTING.value)
        if kind in (None, ChangeKind.DRAINS):
            drained = await self._require().read_drains()
            if self._drains.follow(drained):
                self._fleet.apply_drained(self._drains.ids)
                self._observer.state_change_applied(ChangeKind.DRAINS.value)
                await asyncio.to_thread(self._drains.persist)
        if kind in (None, ChangeKind.VOICES):
            await self._apply_voices()

    async def _apply_voices(self) -> None:
        backend = self._require()
        # Local first, then remote: a voice written here meanwhile is in Redis before it is
        # on disk, so it can look "missing locally" (harmless) but never "deleted remotely".
        local = {name_key(v.worker_name): v for v in self._voices.list()}
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
            stored = await backend.read_voice(voice.worker_name)
            if stored is not None:
                changed |= await asyncio.to_thread(self._voices.install, Voice.from_meta(stored.meta), stored.audio)
        for key, voice in local.items():
            if key not in metas:
                changed |= await asyncio.to_thread(self._voices.discard, voice.worker_name)
        if changed:
            self._observer.state_change_applied(ChangeKind.VOICES.value)
            self._voices_changed()

    async def _seed_empty_store(self) -> None:
        backend = self._require()
        if not await backend.claim_seeding():
            return  # another replica is filling it; its "all" message brings us back
        log.warning("the shared state store is empty; filling it from this replica's copy")
        await backend.replace_routing(self._thresholds.overrides())
        for worker_id in sorted(self._drains.ids):
            await backend.set_drained(worker_id, True)
        for voice in self._voices.list():
            audio = await asyncio.to_thread(self._voices.read_audio, voice)
            await backend.put_voice(StoredVoice(voice.to_meta(), audio))
        await backend.mark_initialized()

    def _require(self) -> StateBackend:
        assert self._backend is not None
        return self._backend
