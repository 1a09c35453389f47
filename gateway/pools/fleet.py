"""The fleet's parts, one job each, built together because they share the workers.

- ``Members``: which workers exist (the ``WorkerSink`` sources report to) and drains;
- ``WorkerHealth``: what probes and requests showed: ejection, half-open, restarts;
- ``Readiness``: preparation (voices, warm-up) before a worker becomes routable;
- ``FleetView``: the read model routing, readiness and operators see;
- ``Leases``: the one way a request holds a worker slot;
- ``FleetEvents``: capacity changed, ejected, restarted, for whoever listens;
- ``ReferenceAffinity``: which workers probably hold a reference clip's codes (voice affinity).

The composition root (``app.create_app``) hands each consumer only the part it needs;
consumers declare the small ``Protocol`` they use, so none depends on this bundle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.config import GatewayConfig
from gateway.pools.affinity import ReferenceAffinity
from gateway.pools.events import FleetEvents
from gateway.pools.lease import Leases
from gateway.pools.members import Members
from gateway.pools.readiness import Readiness
from gateway.pools.specs import PoolSpec
from gateway.pools.view import FleetView
from gateway.pools.worker_health import WorkerHealth
from gateway.types import PoolName


@dataclass(frozen=True, slots=True)
class Fleet:
    specs: dict[PoolName, PoolSpec]
    events: FleetEvents
    readiness: Readiness
    members: Members
    health: WorkerHealth
    view: FleetView
    leases: Leases
    affinity: ReferenceAffinity

    @classmethod
    def build(
        cls,
        config: GatewayConfig,
        specs: dict[PoolName, PoolSpec],
        clock: Callable[[], float] = time.monotonic,
        drained: Iterable[str] = (),
    ) -> Fleet:
        events = FleetEvents()
        readiness = Readiness(events, clock)
        members = Members(specs, readiness, events, clock, drained)
        affinity = ReferenceAffinity()
        events.on_worker_restarted(lambda worker, _why: affinity.forget_worker(worker.worker_id))
        return cls(
            specs=specs,
            events=events,
            readiness=readiness,
            members=members,
            health=WorkerHealth(members, readiness, events, config.health, clock),
            view=FleetView(members, specs, config.load_reports.stale_after_s, clock),
            leases=Leases(members, events, clock),
            affinity=affinity,
        )
