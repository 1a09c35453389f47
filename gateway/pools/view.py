"""The read model: the fleet as routing, readiness and operators see it, read-only.

``snapshot()`` is the ``LoadView`` a routing decision starts from; ``describe()`` is
``GET /admin/pools``. Nothing here changes a worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gateway.pools.members import Members
from gateway.pools.specs import PoolSpec
from gateway.pools.worker import Worker
from gateway.types import PoolName
from gateway.types.view import LoadView


class FleetView:
    def __init__(
        self,
        members: Members,
        specs: dict[PoolName, PoolSpec],
        stale_after_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._members = members
        self._specs = specs
        self._stale_after_s = stale_after_s
        self._clock = clock
        self._sharing: Callable[[], dict[str, object]] | None = None

    def show_sharing(self, describe: Callable[[], dict[str, object]]) -> None:
        """What ``describe`` says of the fleet view shared with other replicas (Redis only)."""
        self._sharing = describe

    @property
    def workers(self) -> Iterable[Worker]:
        return self._members.workers

    def snapshot(self) -> LoadView:
        now, stale = self._clock(), self._stale_after_s
        return LoadView(tuple(w.load_view(now, stale) for w in self._members.workers))

    def any_routable(self) -> bool:
        """Whether any worker can take a request: admission's precheck, without a view."""
        return any(w.routable for w in self._members.workers)

    def routable_count(self, pool: PoolName) -> int:
        return sum(1 for w in self._members.workers if w.pool == pool and w.routable)

    def describe(self) -> dict[str, object]:
        now, stale = self._clock(), self._stale_after_s
        pools: dict[str, object] = {}
        for name, spec in self._specs.items():
            members = [w for w in self._members.workers if w.pool == name]
            pools[name.value] = {
                "profile": spec.profile_path,
                "max_num_seqs": spec.max_num_seqs,
                "slots_per_worker": spec.slots_per_worker,
                "routable_workers": sum(1 for w in members if w.routable),
                "capacity_slots": sum(w.slots for w in members if w.routable),
                "inflight": sum(w.inflight for w in members),
                "workers": [w.describe(now, stale) for w in members],
            }
        status: dict[str, object] = {"pools": pools}
        if self._sharing is not None:
            status["fleet_view"] = self._sharing()
        return status
