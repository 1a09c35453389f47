"""The smallest low-latency / high-throughput mix that meets every class's objective: pure math.

For a pool carrying a set of classes, its **operating load** is the most streams one of
its workers may run while every one of those classes still meets its objective on the
pool's curve (RTF at that load under the class's RTF, TTFP under its TTFP target), capped
by ``max_num_seqs``. A pool of ``n`` workers offers ``n x operating load x
target_utilisation`` streams (the rest absorbs what an average hides: Poisson bursts,
long texts arriving together). By Little's law a class arriving at ``rate`` requests per
second needs ``rate x (ttfp + audio_s x rtf)`` of them, TTFP and RTF read at that planned
load (a full pool's workers each carry ``operating load x target_utilisation``).

Where traffic goes follows the routing: `latency` on low-latency (on high-throughput only
when the operator allows it, ``latency_anywhere``, and the mix has no low-latency worker,
or when there is no low-latency pool at all); `balanced` and `throughput` anywhere, split
between the pools as a fraction.

`latency` cannot queue (its time to first audio leaves no room for it), and the routing
lets the other classes fill a low-latency worker up to its cap less a small reserve. So
besides its average, the pool carrying `latency` must hold its bursts: the streams
`latency` has in flight at once ``LATENCY_QUANTILE`` of the time (Poisson, as the
routing's reserve counts them: an M/G/inf system) must fit in the pool's planned
capacity, or that share of `latency` requests would find no place and spill. That is the
pool's headroom: the split classes' average may fill it to its full operating load (the
routing spills what does not fit to high-throughput, which keeps its own headroom).

A mix is tried under every placement of `balanced` and `throughput` (low-latency only,
high-throughput only, or split); a split class fills the low-latency spare first where it
saves the most high-throughput streams per low-latency stream, which is optimal for two
pools. A mix is *feasible* when some placement fits; its **margin** is
how much all traffic could grow, as a fraction, before none does.

Candidates: for each low-latency count within its bounds, the fewest high-throughput
workers that make it feasible. The plan is the candidate with the fewest workers in all;
among as many, the one that adds the fewest workers to the mix the last plan asked for (a
plan does not flip between equal mixes, nor grow 1+1 into 3+0 where 2+1 does), then the one
that serves today's traffic fastest (the lowest mean predicted RTF
at the load it would put on each worker: a low-latency worker at c4, two high-throughput
ones at c64), then the largest margin.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.routing.reserve import poisson_quantile
from gateway.types import PoolName, SlaClass
from gateway.types.curve import Curve
from gateway.types.labels import PlanBound

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT
_SPLITTABLE = (SlaClass.BALANCED, SlaClass.THROUGHPUT)
# How far traffic may grow before the margin search stops looking (x64).
_MAX_GROWTH = 64.0
# `latency` requests that should find a place at once: the objectives' 99%.
LATENCY_QUANTILE = 0.99
# A fixed fleet changes a GPU's profile only for a split clearly better than the running one:
# streams at least 5% faster on average, or (when no split meets every objective) room for
# 10% more traffic than the running one.
SERVICE_RTF_HYSTERESIS = 0.05
MARGIN_HYSTERESIS = 0.10


@dataclass(frozen=True, slots=True)
class Objective:
    rtf: float
    ttfp_s: float | None = None


@dataclass(frozen=True, slots=True)
class Demand:
    """One class's traffic: requests per second and their mean audio seconds."""

    rate: float
    audio_s: float


@dataclass(frozen=True, slots=True)
class Bounds:
    minimum: int
    maximum: int


@dataclass(frozen=True, slots=True)
class Candidate:
    """One mix tried: its counts, whether it meets every objective and by how much."""

    workers: Mapping[PoolName, int]
    feasible: bool
    margin: float  # traffic growth it absorbs (0.25 = +25%); -1.0 when no placement fits
    operating_load: Mapping[PoolName, int]  # streams per worker of the best placement
    bound_by: Mapping[PoolName, PlanBound]  # what set each pool's operating load
    placement: Mapping[SlaClass, Mapping[PoolName, float]]  # share of each class per pool
    service_rtf: float  # mean predicted RTF of today's streams on this mix (lower: better served)

    @property
    def total(self) -> int:
        return sum(self.workers.values())


@dataclass(frozen=True, slots=True)
class Sizing:
    """The chosen mix, the objective each count is bound by, and every candidate tried."""

    workers: Mapping[PoolName, int]
    bound_by: Mapping[PoolName, PlanBound]
    margin: float
    feasible: bool  # False: even the maximums miss an objective (the maximums are asked for)
    candidates: tuple[Candidate, ...]
    why: str


def _added(workers: Mapping[PoolName, int], previous: Mapping[PoolName, int] | None) -> int:
    """Workers a mix adds to the previous one, pool by pool (0 without a previous one)."""
    if previous is None:
        return 0
    return sum(max(0, n - previous.get(pool, 0)) for pool, n in workers.items())


def operating_load(curve: Curve, classes: list[SlaClass], objectives: Mapping[SlaClass, Objective]) -> tuple[int, PlanBound]:
    """Most streams a worker on ``curve`` may run with every class in ``classes`` meeting its
    objective (0 if not even one), and what stops it going higher."""
    for load in range(1, curve.max_load + 1):
        for sla in classes:
            objective = objectives[sla]
            if curve.rtf(load) > objective.rtf:
                return load - 1, PlanBound(f"{sla.value}_rtf")
            if objective.ttfp_s is not None and curve.ttfp(load) > objective.ttfp_s:
                return load - 1, PlanBound(f"{sla.value}_ttfp")
    return curve.max_load, PlanBound.MAX_LOAD


@dataclass(frozen=True, slots=True)
class _Shape:
    capacity: dict[PoolName, float]  # streams each pool offers
    fixed: dict[PoolName, float]  # streams per unit of traffic of the classes on one pool only
    split: tuple[tuple[SlaClass, float, float], ...]  # (class, LL streams, HT streams) per unit
    single: dict[SlaClass, PoolName]  # the classes on one pool only
    # `latency`'s pool, its mean streams per unit of traffic, and the streams its bursts may take
    burst: tuple[PoolName, float, float] | None = None

    def place(self, scale: float) -> tuple[bool, dict[PoolName, float], dict[SlaClass, dict[PoolName, float]]]:
        """Whether ``scale`` x the traffic fits, the streams per pool, each class's shares."""
        used = {pool: use * scale for pool, use in self.fixed.items()}
        bursts_fit = True
        if self.burst is not None:
            _, mean, room = self.burst
            bursts_fit = poisson_quantile(mean * scale, LATENCY_QUANTILE) <= room + 1e-9
        shares: dict[SlaClass, dict[PoolName, float]] = {sla: {pool: 1.0} for sla, pool in self.single.items()}
        for sla, on_ll, on_ht in self.split:
            on_ll, on_ht = on_ll * scale, on_ht * scale
            fraction = min(1.0, max(0.0, self.capacity[LL] - used[LL]) / on_ll) if on_ll > 0 else 1.0
            used[LL] += fraction * on_ll
            used[HT] += (1.0 - fraction) * on_ht
            shares[sla] = {LL: round(fraction, 4), HT: round(1.0 - fraction, 4)}
        return bursts_fit and all(used[pool] <= self.capacity[pool] + 1e-9 for pool in used), used, shares


class MixSizer:
    """Sizes one arrival mix on one set of pool curves (built per planning pass)."""

    def __init__(
        self,
        curves: Mapping[PoolName, Curve],
        objectives: Mapping[SlaClass, Objective],
        demand: Mapping[SlaClass, Demand],
        utilisation: float,
        latency_anywhere: bool = False,
    ) -> None:
        self._curves = curves
        self._latency_anywhere = latency_anywhere
        self._objectives = objectives
        self._demand = {sla: d for sla, d in demand.items() if d.rate > 0}
        self._utilisation = utilisation
        self._loads: dict[tuple[PoolName, frozenset[SlaClass]], tuple[int, PlanBound]] = {}

    # --- one mix ---------------------------------------------------------------------
    def candidate(self, workers: Mapping[PoolName, int]) -> Candidate:
        best: tuple[float, dict[PoolName, frozenset[SlaClass]]] | None = None
        for layout in self._layouts(workers):
            growth = self._growth(workers, layout)
            if growth is not None and (best is None or growth > best[0]):
                best = (growth, layout)
        if best is None:
            return Candidate(dict(workers), False, -1.0, {}, {}, {}, 0.0)
        growth, layout = best
        loads = {pool: self._load(pool, classes) for pool, classes in layout.items()}
        _, _, shares = self._shape(workers, layout).place(1.0)  # shown at today's traffic
        return Candidate(
            dict(workers), growth >= 0, round(growth, 4),
            {pool: load for pool, (load, _) in loads.items()}, {pool: bound for pool, (_, bound) in loads.items()},
            shares, round(self._service_rtf(workers, layout), 4),
        )  # fmt: skip

    def _layouts(self, workers: Mapping[PoolName, int]) -> list[dict[PoolName, frozenset[SlaClass]]]:
        """Every placement of the classes on the pools this mix has (which class may go where)."""
        pools = [pool for pool in (LL, HT) if workers.get(pool, 0) > 0 and pool in self._curves]
        if not pools:
            return []
        fixed: dict[SlaClass, tuple[PoolName, ...]] = {}
        if SlaClass.LATENCY in self._demand:
            if LL in pools:
                fixed[SlaClass.LATENCY] = (LL,)
            elif self._latency_anywhere:
                fixed[SlaClass.LATENCY] = (HT,)
            else:
                return []  # `latency` stays on low-latency: a mix without one cannot carry it
        options = [
            [(pool,) for pool in pools] + ([tuple(pools)] if len(pools) > 1 else [])
            for sla in _SPLITTABLE if sla in self._demand
        ]  # fmt: skip
        splittable = [sla for sla in _SPLITTABLE if sla in self._demand]
        layouts = []
        for choice in itertools.product(*options):
            where = {**fixed, **dict(zip(splittable, choice, strict=True))}
            layouts.append({pool: frozenset(sla for sla, on in where.items() if pool in on) for pool in pools})
        return layouts

    def _load(self, pool: PoolName, classes: frozenset[SlaClass]) -> tuple[int, PlanBound]:
        key = (pool, classes)
        if key not in self._loads:
            order = [sla for sla in SlaClass if sla in classes]  # stable: latency first
            self._loads[key] = operating_load(self._curves[pool], order, self._objectives)
        return self._loads[key]

    def _unit(self, pool: PoolName, classes: frozenset[SlaClass], sla: SlaClass) -> float:
        """Streams ``sla``'s whole traffic holds on ``pool``, each running at the planned load
        (the operating load x target utilisation: what a worker carries when the pool is full)."""
        load, _ = self._load(pool, classes)
        planned = max(1, round(load * self._utilisation))
        curve, demand = self._curves[pool], self._demand[sla]
        return demand.rate * (curve.ttfp(planned) + demand.audio_s * curve.rtf(planned))

    def _shape(self, workers: Mapping[PoolName, int], layout: dict[PoolName, frozenset[SlaClass]]) -> _Shape:
        """A placement's arithmetic, once: capacities, fixed use and the split classes in fill order."""
        capacity = {pool: workers[pool] * self._load(pool, classes)[0] * self._utilisation for pool, classes in layout.items()}
        room_for_bursts = dict(capacity)
        fixed = dict.fromkeys(layout, 0.0)
        split, single = [], {}
        burst = None
        for sla in self._demand:
            on = [pool for pool, classes in layout.items() if sla in classes]
            if len(on) == 1:
                single[sla] = on[0]
                streams = self._unit(on[0], layout[on[0]], sla)
                fixed[on[0]] += streams
                if sla is SlaClass.LATENCY:
                    burst = (on[0], streams, room_for_bursts[on[0]])
            else:
                split.append((sla, self._unit(LL, layout[LL], sla), self._unit(HT, layout[HT], sla)))
        if burst is not None and burst[0] is LL and split:
            # `latency`'s low-latency pool keeps its headroom for `latency`'s bursts (the
            # quantile above, within the utilisation), but the split classes' average may
            # fill it to the full operating load: the routing fills low-latency workers with
            # them up to their cap and sends what does not fit to high-throughput, whose own
            # headroom takes their bursts. Planning them at the utilisation on both pools
            # counted that headroom twice (the plan's 2 + 2 at the day's peak, where 2 + 1
            # meets every objective in the simulator).
            capacity[LL] = workers[LL] * self._load(LL, layout[LL])[0]
        # Two pools: the split classes fill the low-latency spare first, the one that saves
        # the most high-throughput streams per low-latency stream first.
        split.sort(key=lambda item: item[2] / item[1], reverse=True)
        return _Shape(capacity, fixed, tuple(split), single, burst)

    def _growth(self, workers: Mapping[PoolName, int], layout: dict[PoolName, frozenset[SlaClass]]) -> float | None:
        """How much the traffic may grow (-1 .. 63) with this placement; None: not even a
        trickle fits (a class whose objective no load meets)."""
        if any(self._load(pool, classes)[0] == 0 for pool, classes in layout.items() if classes):
            return None
        shape = self._shape(workers, layout)
        low, high = 0.0, _MAX_GROWTH
        if shape.place(high)[0]:
            return high - 1.0
        for _ in range(24):  # bisection: placements only get harder as traffic grows
            middle = (low + high) / 2
            if shape.place(middle)[0]:
                low = middle
            else:
                high = middle
        return low - 1.0

    def _service_rtf(self, workers: Mapping[PoolName, int], layout: dict[PoolName, frozenset[SlaClass]]) -> float:
        """Mean RTF of today's streams, each pool at the load its share of them puts on a worker."""
        shape = self._shape(workers, layout)
        _, used, _ = shape.place(1.0)
        streams = sum(used.values())
        if streams <= 0:
            return 0.0
        total = 0.0
        for pool, n in used.items():
            if n > 0:
                total += n * self._curves[pool].rtf(max(1, round(n / workers[pool])))
        return total / streams

    # --- the search --------------------------------------------------------------------
    def size(self, bounds: Mapping[PoolName, Bounds], previous: Mapping[PoolName, int] | None = None) -> Sizing:
        ll, ht = bounds[LL], bounds[HT]
        candidates: list[Candidate] = []
        for ll_count in range(ll.minimum, ll.maximum + 1):
            found = self._fewest_ht(ll_count, ht)
            if found is not None:
                candidates.append(found)
        feasible = [c for c in candidates if c.feasible]
        if not feasible:
            most = self.candidate({LL: ll.maximum, HT: ht.maximum})
            bound = {LL: PlanBound.MAXIMUM, HT: PlanBound.MAXIMUM}
            return Sizing(most.workers, bound, most.margin, False, tuple(candidates) or (most,),
                          "no mix within the pools' maximums meets every objective: asking for the maximums")  # fmt: skip
        # Among as many workers, the mix that adds the fewest to the last one asked for: a
        # pool-by-pool autoscaler scales down only after a stabilisation window, so every
        # switch between equal mixes (2+2 and 3+1) holds the larger count of each (3+2), and
        # growing 1+1 into 3+0 rather than 2+1 would hold 3+1. The last mix itself adds none.
        kept = dict(previous) if previous is not None else None
        chosen = min(feasible, key=lambda c: (c.total, _added(c.workers, kept), c.service_rtf, -c.margin))
        bound_by = {}
        for pool, bound in (bounds.items()):
            count = chosen.workers[pool]
            if count == bound.minimum and (count == 0 or not self._needed(chosen, pool)):
                bound_by[pool] = PlanBound.MINIMUM
            else:
                bound_by[pool] = chosen.bound_by.get(pool, PlanBound.MINIMUM)
        ties = [c for c in feasible if c.total == chosen.total and c is not chosen]
        why = f"fewest workers that meet every objective ({chosen.total})"
        if ties and dict(chosen.workers) == kept:
            why += f"; of {len(ties) + 1} mixes with as many, the one already asked for"
        elif ties and kept is not None and _added(chosen.workers, kept) < max(_added(c.workers, kept) for c in ties):
            why += f"; of {len(ties) + 1} mixes with as many, the one that adds the fewest workers to the last one asked for"
        elif ties:
            why += f"; of {len(ties) + 1} mixes with as many, the one that serves today's traffic fastest"
        return Sizing(chosen.workers, bound_by, chosen.margin, True, tuple(candidates), why)

    def best_of(self, total: int, bounds: Mapping[PoolName, Bounds], keep: Mapping[PoolName, int] | None = None) -> Candidate | None:
        """The best split of exactly ``total`` workers within the bounds (None: no split fits
        them): of those meeting every objective, the one serving today's traffic fastest; when
        none does, the one absorbing the most traffic (the highest margin: the least short).
        ``keep`` (the split running now) stays unless the best is ``worth_moving`` to."""
        ll, ht = bounds[LL], bounds[HT]
        splits = range(max(ll.minimum, total - ht.maximum), min(ll.maximum, total - ht.minimum) + 1)
        candidates = [self.candidate({LL: n, HT: total - n}) for n in splits]
        if not candidates:
            return None
        feasible = [c for c in candidates if c.feasible]
        if feasible:
            best = min(feasible, key=lambda c: (c.service_rtf, -c.margin))
        else:
            best = max(candidates, key=lambda c: (c.margin, -c.service_rtf))
        kept = next((c for c in candidates if keep is not None and dict(c.workers) == dict(keep)), None)
        return best if kept is None or self.worth_moving(kept, best) else kept

    def worth_moving(self, running: Candidate, to: Candidate) -> bool:
        """Is ``to`` clearly better than the fixed fleet's ``running`` split? A profile change
        takes a GPU away for minutes, which a few percent do not pay for, and two near-equal
        splits must not trade places whenever the learned curves move."""
        if running.feasible:
            return to.feasible and to.service_rtf <= running.service_rtf * (1 - SERVICE_RTF_HYSTERESIS)
        # Margins are growth factors: compare the traffic each split carries (1 + margin).
        return to.feasible or 1 + to.margin >= (1 + running.margin) * (1 + MARGIN_HYSTERESIS)

    def _fewest_ht(self, ll_count: int, ht: Bounds) -> Candidate | None:
        """The fewest high-throughput workers beside ``ll_count`` low-latency ones that meet
        every objective (feasibility only grows with workers: a binary search)."""
        if ll_count == 0 and ht.maximum == 0:
            return None
        if not self.feasible({LL: ll_count, HT: ht.maximum}):
            return self.candidate({LL: ll_count, HT: ht.maximum})
        low, high = ht.minimum, ht.maximum
        while low < high:
            middle = (low + high) // 2
            if self.feasible({LL: ll_count, HT: middle}):
                high = middle
            else:
                low = middle + 1
        return self.candidate({LL: ll_count, HT: low})

    def feasible(self, workers: Mapping[PoolName, int]) -> bool:
        """Does some placement of today's traffic on this mix meet every objective?"""
        for layout in self._layouts(workers):
            if all(self._load(pool, classes)[0] > 0 for pool, classes in layout.items() if classes):
                if self._shape(workers, layout).place(1.0)[0]:
                    return True
        return False

    def _needed(self, chosen: Candidate, pool: PoolName) -> bool:
        """Would one worker fewer in ``pool`` (bounds aside) miss an objective?"""
        fewer = dict(chosen.workers)
        fewer[pool] -= 1
        return not self.candidate(fewer).feasible
