"""Keep state shared with workers and other gateway replicas in step, in the background.

A worker that stayed up but missed a voice upload or delete (timeout, 5xx) would
otherwise keep a stale voice list until its next restart, and a threshold or drain
changed through another replica would only apply here after a restart.

Replicas sharing a data directory follow each other by polling its files here. With a
shared state store (``follow_data_dir=False``) its follower brings those changes instead
and the data directory is this replica's own copy: only the voice replay runs here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.pools.background import BackgroundLoop
from gateway.pools.drains import DrainStore
from gateway.routing.control import RoutingControl
from gateway.state.shared import DrainFollower
from gateway.voices.registry import VoiceRegistry

log = logging.getLogger("higgs_gateway")
SHARED_STATE_INTERVAL_S = 2.0
VOICE_SYNC_INTERVAL_S = 10.0


class ReplicaSync:
    def __init__(
        self,
        routing: RoutingControl,
        drains: DrainStore,
        fleet: DrainFollower,
        voices: VoiceRegistry,
        clock: Callable[[], float],
        follow_data_dir: bool = True,
    ) -> None:
        self._routing = routing
        self._follow_data_dir = follow_data_dir
        self._drains = drains
        self._fleet = fleet
        self._voices = voices
        self._clock = clock
        self._loop = BackgroundLoop("replica-sync")

    def start(self) -> None:
        self._loop.start(self._run())

    async def stop(self) -> None:
        await self._loop.stop()

    def follow_once(self) -> None:
        self._routing.follow_other_replicas()
        if self._drains.reload_if_changed():
            self._fleet.apply_drained(self._drains.ids)

    async def _run(self) -> None:
        last_voice_sync = 0.0
        while True:
            await asyncio.sleep(SHARED_STATE_INTERVAL_S)
            try:
                if self._follow_data_dir:
                    self.follow_once()
                if self._voices.out_of_step and self._clock() - last_voice_sync >= VOICE_SYNC_INTERVAL_S:
                    last_voice_sync = self._clock()
                    await self._voices.reconcile()
            except Exception:
                log.exception("shared-state upkeep failed; retrying later")
