"""The fleet planner: the desired low-latency / high-throughput mix, recomputed in the background.

Every ``planner.interval_s`` it reads the published curve snapshot (each pool's curve: what
a worker of that pool is predicted to do, as learned from its peers), folds the arrivals
admission counted into smoothed per-class rates and lengths, sizes the mix
(``sizing.MixSizer``) and publishes the result as one immutable ``PlanSnapshot``.
Everything that reads it (``desired_workers``, the gauges, ``GET /admin/planner``) reads
that snapshot: nothing is computed on a request or a scrape.

Too little traffic to judge (fewer than ``min_requests`` in the smoothing window): the
last judged mix stays published, ``desired_workers()`` answers None and the snapshot
says why, so neither an autoscaler nor the supervisor changes anything on a guess.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.config import PlannerConfig
from gateway.planner.arrivals import ArrivalMeter, ArrivalMix
from gateway.planner.sizing import Bounds, Candidate, Demand, MixSizer, Objective, Sizing
from gateway.routing.performance import CurveSnapshot
from gateway.types import PoolName
from gateway.types.curve import Curve
from gateway.types.view import RequestInfo

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class PlanSnapshot:
    """One planning pass, whole: what it saw, what it tried, what it wants."""

    at: float  # the planner clock's time of the pass
    judged: bool  # enough traffic this pass to size the fleet
    status: str  # one line: why this answer (or why none)
    arrivals: ArrivalMix | None
    # The last judged answer (kept while traffic is too thin); None before the first one.
    sizing: Sizing | None
    curves: Mapping[PoolName, Curve] = field(default_factory=dict)
    judged_at: float | None = None  # when ``sizing`` was computed

    @property
    def desired(self) -> Mapping[PoolName, int] | None:
        return self.sizing.workers if self.sizing is not None else None


class FleetPlanner:
    """Counts arrivals (``record_arrival``), sizes the fleet in ``run``, publishes a snapshot."""

    def __init__(self, config: PlannerConfig, curves: Callable[[], CurveSnapshot], clock: Clock = time.monotonic) -> None:
        self.config = config
        self._curves = curves
        self._clock = clock
        self._meter = ArrivalMeter(config.smoothing_s, clock(), config.forecast_s)
        status = "planning every %gs; no pass yet" % config.interval_s if config.enabled else "disabled (planner.enabled: false)"
        self._published = PlanSnapshot(clock(), False, status, None, None)
        self.record_arrival: Callable[[RequestInfo], None] = self._meter.record

    # --- reading: the published snapshot only ------------------------------------------
    def snapshot(self) -> PlanSnapshot:
        return self._published

    def desired_workers(self) -> Mapping[str, int] | None:
        """Pool name -> workers the traffic needs; None while the planner cannot judge."""
        plan = self._published
        if not plan.judged or plan.sizing is None:
            return None
        return MappingProxyType({pool.value: count for pool, count in plan.sizing.workers.items()})

    def mix_for(self, running: Mapping[str, int]) -> Mapping[str, int] | None:
        """The mix a fixed fleet running ``running`` (pool name -> workers) should run.

        Profile changes move GPUs, never add them, so this is not ``desired_workers()`` (the
        fewest workers, for an autoscaler) but the best split of exactly as many workers for
        today's traffic (``MixSizer.best_of``): of the splits meeting every objective the one
        running the streams fastest, else the one falling least short (at sustained c64 on
        two GPUs, two high-throughput workers), the running split unless another is clearly
        better. None: cannot judge."""
        plan = self._published
        if not plan.judged or plan.sizing is None or plan.arrivals is None:
            return None
        keep = {pool: running.get(pool.value, 0) for pool in PoolName}
        bounds = pool_bounds(self.config, plan.curves)
        best = sizer(self.config, plan.curves, plan.arrivals, bounds).best_of(sum(keep.values()), bounds, keep)
        return None if best is None else MappingProxyType({pool.value: n for pool, n in best.workers.items()})

    # --- planning: off every request's path -----------------------------------------
    async def run(self) -> None:
        """Plan every ``interval_s``, forever; a failed pass is logged and the last plan kept."""
        while True:
            await asyncio.sleep(self.config.interval_s)
            try:
                await self.plan_in_background()
            except Exception:  # a bad curve or config must not end the loop
                log.exception("planner pass failed; keeping the last plan")

    async def plan_in_background(self) -> PlanSnapshot:
        """One pass whose sizing (milliseconds of arithmetic) runs in a thread, off the loop."""
        now, arrivals, curves = self._inputs()
        sizing = None
        if arrivals.requests >= self.config.min_requests:
            sizing = await asyncio.to_thread(size_fleet, self.config, curves, arrivals, self._published.desired)
        return self._publish(now, arrivals, curves, sizing)

    def plan(self) -> PlanSnapshot:
        """One pass at once: sample the arrivals, size the fleet (if there is enough to go on), publish."""
        now, arrivals, curves = self._inputs()
        enough = arrivals.requests >= self.config.min_requests
        sizing = size_fleet(self.config, curves, arrivals, self._published.desired) if enough else None
        return self._publish(now, arrivals, curves, sizing)

    def _inputs(self) -> tuple[float, ArrivalMix, dict[PoolName, Curve]]:
        now = self._clock()
        snapshot = self._curves()
        curves = {pool: snapshot.pools[pool] for pool in PoolName if pool in snapshot.pools}
        return now, self._meter.sample(now), curves

    def _publish(self, now: float, arrivals: ArrivalMix, curves: dict[PoolName, Curve], sizing: Sizing | None) -> PlanSnapshot:
        if sizing is None:
            last = self._published
            status = (
                f"too little traffic to judge: {arrivals.requests:.1f} requests in the last "
                f"{arrivals.window_s:.0f}s, {self.config.min_requests:g} needed; nothing changes"
            )
            self._published = PlanSnapshot(now, False, status, arrivals, last.sizing, curves, last.judged_at)
        else:
            self._published = PlanSnapshot(now, True, sizing.why, arrivals, sizing, curves, now)
        return self._published

    # --- explaining ---------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """``GET /admin/planner``: inputs, the candidate mixes tried, and why this one."""
        plan, config = self._published, self.config
        document: dict[str, Any] = {
            "enabled": config.enabled,
            "judged": plan.judged,
            "status": plan.status,
            "desired_workers": dict(self.desired_workers() or {}) or None,
            "inputs": {
                "arrivals": _arrivals(plan.arrivals),
                "objectives": {sla.value: o.model_dump() for sla, o in config.objectives.items()},
                "pool_bounds": {pool.value: config.bounds(pool).model_dump() for pool in PoolName},
                "target_utilisation": config.target_utilisation,
                "min_requests": config.min_requests,
                "curves": {pool.value: _curve_points(curve) for pool, curve in plan.curves.items()},
            },
        }
        sizing = plan.sizing
        if sizing is not None:
            document["plan"] = {
                "workers": {pool.value: n for pool, n in sizing.workers.items()},
                "bound_by": {pool.value: bound.value for pool, bound in sizing.bound_by.items()},
                "margin": sizing.margin,
                "feasible": sizing.feasible,
                "why": sizing.why,
                "age_s": round(plan.at - plan.judged_at, 1) if plan.judged_at is not None else None,
            }
            document["candidates"] = [_candidate(c, c.workers == sizing.workers) for c in sizing.candidates]
        return document


def size_fleet(
    config: PlannerConfig, curves: Mapping[PoolName, Curve], arrivals: ArrivalMix, previous: Mapping[PoolName, int] | None = None
) -> Sizing:
    """The pure step of a pass: config, pool curves and arrivals in, the sized mix out."""
    bounds = pool_bounds(config, curves)
    return sizer(config, curves, arrivals, bounds).size(bounds, previous)


def pool_bounds(config: PlannerConfig, curves: Mapping[PoolName, Curve]) -> dict[PoolName, Bounds]:
    # A pool with no curve (not configured) can take no worker.
    return {pool: Bounds(config.bounds(pool).min, config.bounds(pool).max) if pool in curves else Bounds(0, 0)
            for pool in PoolName}  # fmt: skip


def sizer(
    config: PlannerConfig, curves: Mapping[PoolName, Curve], arrivals: ArrivalMix, bounds: Mapping[PoolName, Bounds]
) -> MixSizer:
    objectives = {sla: Objective(o.rtf, o.ttfp_s) for sla, o in config.objectives.items()}
    demand = {sla: Demand(a.rate, a.audio_s) for sla, a in arrivals.classes.items()}
    # With no low-latency pool to use, `latency` goes where it can (as the routing sends it).
    latency_anywhere = config.latency_on_high_throughput or bounds[PoolName.LOW_LATENCY].maximum == 0
    return MixSizer(curves, objectives, demand, config.target_utilisation, latency_anywhere)


def _arrivals(mix: ArrivalMix | None) -> dict[str, Any] | None:
    if mix is None:
        return None
    return {
        "window_s": round(mix.window_s, 1),
        "requests": round(mix.requests, 1),
        "classes": {
            sla.value: {"rate_per_s": round(a.rate, 4), "trend_per_s2": round(a.trend, 6), "mean_audio_s": round(a.audio_s, 2), "requests": round(a.requests, 1)}
            for sla, a in mix.classes.items()
        },
    }


def _candidate(candidate: Candidate, chosen: bool) -> dict[str, Any]:
    return {
        "workers": {pool.value: n for pool, n in candidate.workers.items()},
        "feasible": candidate.feasible,
        "margin": candidate.margin,
        "operating_load": {pool.value: n for pool, n in candidate.operating_load.items()},
        "bound_by": {pool.value: bound.value for pool, bound in candidate.bound_by.items()},
        "placement": {sla.value: {pool.value: share for pool, share in shares.items()} for sla, shares in candidate.placement.items()},
        "chosen": chosen,
    }


_SHOWN_LOADS = (1, 2, 4, 8, 16, 32, 64)


def _curve_points(curve: Curve) -> list[dict[str, float]]:
    return [
        {"load": load, "rtf": round(curve.rtf(load), 4), "ttfp_ms": round(curve.ttfp(load) * 1000, 1)}
        for load in _SHOWN_LOADS
        if load <= curve.max_load
    ]
