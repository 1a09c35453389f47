"""Which pools can serve right now, since when one cannot, and whether the gateway can.

The gateway is *ready* while at least one pool has a routable worker: routing already
sends every class to the remaining pool (reasons ``no_ll_workers`` / ``no_ht_workers``),
so pulling every replica out of a Service because one pool is empty would turn a partial
failure into a total one. That state is *degraded*: visible in ``/ready``'s body, in
``higgs_gateway_degraded`` and ``higgs_gateway_pool_empty_seconds``, and logged once per
transition (not per request). ``server.ready_requires: every_pool`` restores the strict
meaning (unready while any pool is empty).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from gateway.config import ReadyRequires
from gateway.types import PoolName

log = logging.getLogger("higgs_gateway.availability")

@dataclass(frozen=True, slots=True)
class Availability:
    """One look at the pools: what ``/ready`` answers and the gauges show."""

    routable: dict[str, int]  # pool -> routable workers
    empty_since: dict[str, float]  # pool -> Unix time it last had a routable worker (empty pools only)
    empty_for_s: dict[str, float]  # pool -> seconds without a routable worker (empty pools only)
    requires: ReadyRequires

    @property
    def empty_pools(self) -> list[str]:
        return sorted(self.empty_for_s)

    @property
    def serving(self) -> bool:
        return len(self.empty_for_s) < len(self.routable)

    @property
    def degraded(self) -> bool:
        """Serving, but some pool is empty."""
        return self.serving and bool(self.empty_for_s)

    def ready_for(self, requires: ReadyRequires) -> bool:
        return self.serving if requires == "any_pool" else not self.empty_for_s

    @property
    def ready(self) -> bool:
        return self.ready_for(self.requires)

    @property
    def status(self) -> str:
        if not self.ready:
            return "not_ready"
        return "degraded" if self.degraded else "ready"


class PoolAvailability:
    """Follows routable counts per pool; call ``refresh()`` whenever capacity may have changed.

    A pool is empty from start-up until its first worker is routable; that first fill is
    not logged per pool (the workers log their own start), only later losses and
    recoveries are. The first moment every pool can serve is logged once: a demo or a
    fresh deployment is fully warm from then on.
    """

    def __init__(
        self,
        routable_count: Callable[[PoolName], int],
        requires: ReadyRequires = "any_pool",
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._routable_count = routable_count
        self._requires = requires
        self._clock = clock
        self._wall_clock = wall_clock
        now = clock()
        self._empty_since: dict[PoolName, float | None] = dict.fromkeys(PoolName, now)
        self._ever_served: set[PoolName] = set()
        self._announced_whole_fleet = False
        self._stopping = False
        self._start_wall = wall_clock() - now  # monotonic -> Unix time

    def stopping(self) -> None:
        """The gateway stops its workers: the pools that empty now are not logged as lost (a
        clean Ctrl-C logged a warning and an error, "no pool can serve")."""
        self._stopping = True

    def refresh(self) -> None:
        """Cheap (a count per pool); logs only on a transition."""
        now = self._clock()
        for pool in PoolName:
            routable = self._routable_count(pool)
            since = self._empty_since[pool]
            if routable == 0 and since is None:
                self._empty_since[pool] = now
                if self._stopping:
                    continue
                others = [p.value for p in PoolName if p is not pool and self._routable_count(p) > 0]
                if others:
                    log.warning(
                        "pool %s has no routable worker: degraded, every class is served by %s",
                        pool.value, ", ".join(others), extra={"pool": pool.value, "degraded": True},
                    )  # fmt: skip
                else:
                    log.error("pool %s has no routable worker: no pool can serve", pool.value, extra={"pool": pool.value})
            elif routable > 0 and since is not None:
                self._empty_since[pool] = None
                if pool in self._ever_served:
                    log.info(
                        "pool %s serves again (%d routable worker(s)) after %.1fs without one",
                        pool.value, routable, now - since, extra={"pool": pool.value, "degraded": False},
                    )  # fmt: skip
                self._ever_served.add(pool)
        if not self._announced_whole_fleet and all(since is None for since in self._empty_since.values()):
            self._announced_whole_fleet = True
            counts = ", ".join(f"{pool.value}: {self._routable_count(pool)}" for pool in PoolName)
            log.info("every pool has a routable worker (%s): ready to serve every class", counts)

    def current(self) -> Availability:
        self.refresh()
        now = self._clock()
        routable = {pool.value: self._routable_count(pool) for pool in PoolName}
        empty = {pool: since for pool, since in self._empty_since.items() if since is not None}
        return Availability(
            routable=routable,
            empty_since={pool.value: round(self._start_wall + since, 3) for pool, since in empty.items()},
            empty_for_s={pool.value: round(now - since, 3) for pool, since in empty.items()},
            requires=self._requires,
        )
