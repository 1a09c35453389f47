"""Per-worker performance curves learned online from what every stream shows.

Each worker starts from its prior (``prior.prior_curve``) and is corrected by what the
gateway observes on its streams, tagged with the worker's load at the time:

- the time to first packet of each request (from dispatch to the first audio bytes);
- the decode pace: a stream delivers one 40 ms frame (1920 bytes of PCM) per decode step,
  so the time between two points of a stream divided by the frames delivered between them
  is the step time at the load the worker carried meanwhile (``observations.PaceMeter``).

Only completed streams teach it: a cut stream, a failed attempt or a client that left
says nothing reliable about the worker's speed.

The correction is kept per load as a weighted mean of ``log(observed / prior)``:

- *shrinkage*, in four levels: a load with few samples leans on its neighbours and on
  the worker's overall correction; that one leans on its pool's (what the other workers of
  the same profile showed), which leans on the fleet's (one factor per kind: what every
  worker showed against its own prior), which leans on the prior. So a worker that is
  uniformly slower (a throttled GPU, cold graphs after a restart) is learned from whatever
  loads it ran at, and a worker with no samples yet (it just joined, restarted, or its GPU
  changed profile) is assumed to be like its peers, not like the profile's estimate:
  predicted slower than they are, it would never be given the traffic that proves
  otherwise. The fleet level is for a pool with no evidence of its own (its only worker
  just came back): the other pool's workers learned how far this hardware is off the
  profiles' estimates, and a factor shared by both keeps the priors' ranking of the two;
- *robustness*: samples off the prior by more than ``max_ratio`` are dropped as absurd, and
  once a load has a few samples a new one moves it by at most ``clamp`` in log space;
- *forgetting*: weights halve every ``half_life_s``, so the curve fades back to the prior
  when a worker's past stops being representative;
- *monotone*: the corrected curve is made non-decreasing in load (pool adjacent
  violators), so more load never predicts a faster worker.

Memory is bounded: a few floats per load per worker. Nothing here does I/O; the clock
is injected.

Learning is off the read path. A stream's end only files its samples (a few additions);
the curves are refit by ``PerformanceModel.run``, a background task, at most every
``REFRESH_S``, and published as one immutable ``CurveSnapshot``. A routing decision, the
admission precheck, a metrics scrape and the admin view only read the published snapshot
(one attribute read), so none of them ever waits on a refit.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.config import LearningSettings
from gateway.routing.reserve import LatencyDemand
from gateway.types import PoolName
from gateway.types.codec import FRAMES_PER_SECOND
from gateway.types.curve import Curve
from gateway.types.observations import StreamObservation, StreamOutcome
from gateway.types.view import LoadView

Clock = Callable[[], float]
# Per load, a pool's sample weights and weighted log corrections: (step, TTFP).
_Sums = tuple[tuple[list[float], list[float]], tuple[list[float], list[float]]]


@dataclass
class _Buckets:
    """Weighted means of log(observed / prior), one per load, with their last-update time."""

    weight: list[float]
    mean: list[float]
    stamp: list[float]

    @classmethod
    def empty(cls, size: int) -> _Buckets:
        return cls([0.0] * size, [0.0] * size, [0.0] * size)

    def decayed(self, now: float, half_life_s: float) -> list[float]:
        return [w * 0.5 ** ((now - s) / half_life_s) if w else 0.0 for w, s in zip(self.weight, self.stamp, strict=True)]

    def add(self, index: int, log_ratio: float, weight: float, now: float, settings: LearningSettings) -> None:
        current = self.weight[index] * 0.5 ** ((now - self.stamp[index]) / settings.half_life_s) if self.weight[index] else 0.0
        mean = self.mean[index]
        if current >= settings.prior_strength:
            log_ratio = min(max(log_ratio, mean - settings.clamp), mean + settings.clamp)
        total = current + weight
        self.mean[index] = (mean * current + log_ratio * weight) / total
        self.weight[index] = total
        self.stamp[index] = now

    def samples(self, now: float, half_life_s: float) -> float:
        return sum(self.decayed(now, half_life_s))


@dataclass
class WorkerModel:
    """One worker: its prior, what it has shown, and the curve both give."""

    prior: Curve
    step: _Buckets = field(init=False)
    ttfp: _Buckets = field(init=False)
    curve: Curve = field(init=False)
    dirty: bool = True  # its samples, or its pool's, changed since the curve was computed

    def __post_init__(self) -> None:
        self.step = _Buckets.empty(self.prior.max_load)
        self.ttfp = _Buckets.empty(self.prior.max_load)
        self.curve = self.prior


@dataclass(frozen=True, slots=True)
class CurveSnapshot:
    """Every worker's curve as of one refit: immutable, read without locks or copies.

    ``pools`` holds, per pool, what a worker with no curve of its own yet (it joined since
    the last refit) is predicted as: its peers' correction on the pool's prior.
    """

    workers: Mapping[str, Curve]
    pools: Mapping[PoolName, Curve] = field(default_factory=lambda: MappingProxyType({}))
    # Places per low-latency worker the `latency` traffic seen lately needs
    # (``routing.reserve``); None: the model is not given the demand (the reserve is fixed).
    latency_places: int | None = None

    @classmethod
    def of(
        cls, workers: Mapping[str, Curve], pools: Mapping[PoolName, Curve] | None = None, latency_places: int | None = None
    ) -> CurveSnapshot:
        return cls(MappingProxyType(dict(workers)), MappingProxyType(dict(pools or {})), latency_places)

    def curve(self, worker_id: str, pool: PoolName) -> Curve | None:
        curve = self.workers.get(worker_id)
        return curve if curve is not None else self.pools.get(pool)


EMPTY_SNAPSHOT = CurveSnapshot.of({})


class PerformanceModel:
    """Every worker's curve: fed by the recorder, refit by ``run``, read as ``snapshot()``."""

    # The background refit runs this often (when anything changed).
    REFRESH_S = 0.25
    # Curves recomputed per event-loop step of a refit (0.3-1.5 ms each at 64 loads): 64
    # learning workers spread their ~20 ms over several steps instead of one long stall.
    RECOMPUTE_PER_STEP = 2

    def __init__(
        self,
        settings: LearningSettings | None = None,
        clock: Clock = time.monotonic,
        priors: Mapping[PoolName, Curve] | None = None,
        demand: LatencyDemand | None = None,
    ) -> None:
        self.settings = settings or LearningSettings()
        self._clock = clock
        # The `latency` traffic admission sees: each refit sizes the latency reserve from it.
        self._demand = demand
        self._priors = dict(priors or {})  # per pool, for workers met in a load view
        self._workers: dict[str, WorkerModel] = {}
        self._pools: dict[str, PoolName] = {}  # workers tracked from the fleet's view
        self._pool_levels: dict[PoolName, tuple[list[float], list[float]]] = {}
        # Pools one of whose workers showed something since the last refit: their peers
        # lean on it, so the refit marks them all (not each observation: O(1) per request).
        self._dirty_pools: set[PoolName] = set()
        # Published at once, the latency reserve included: a decision before the first
        # refit sees the demand's answer (no `latency` traffic yet), not a pinned reserve.
        self._published: CurveSnapshot
        self._publish()

    # --- membership (control path) ----------------------------------------------------
    def add_worker(self, worker_id: str, prior: Curve, pool: PoolName | None = None) -> None:
        if worker_id not in self._workers:
            self._workers[worker_id] = WorkerModel(prior)
            if pool is not None:
                self._pools[worker_id] = pool
            self._publish()

    def track(self, view: LoadView) -> None:
        """Follow the fleet: a worker first seen starts from its pool's prior, one gone is dropped."""
        workers, pools = self._workers, self._pools
        for worker in view.workers:
            worker_id = worker.worker_id
            if worker_id in workers and pools.get(worker_id, worker.pool) is worker.pool:
                continue
            # New, or back under another pool's profile: what it showed under the old
            # profile was measured against the old prior, so it starts over.
            self.remove_worker(worker_id)
            prior = self._priors.get(worker.pool)
            if prior is not None:
                # Every worker of a pool keeps the pool's prior, so their samples are
                # comparable: the pool level of the shrinkage is what they share.
                workers[worker_id] = WorkerModel(prior)
                pools[worker_id] = worker.pool
        if len(workers) > len(view.workers):
            # Workers that left the fleet (discovery, scale-down): bounded memory.
            present = {worker.worker_id for worker in view.workers}
            for worker_id in [w for w in workers if w not in present]:
                self.remove_worker(worker_id)

    def set_priors(self, priors: Mapping[PoolName, Curve]) -> None:
        """New priors (e.g. ``tune``'s measured curves): workers of a changed pool start over."""
        changed = {pool for pool, curve in priors.items() if self._priors.get(pool) != curve}
        self._priors = dict(priors)
        for worker_id in list(self._workers):
            pool = self._pools.get(worker_id)
            if pool in changed:
                self._workers[worker_id] = WorkerModel(priors[pool])
        self._pool_levels = {pool: level for pool, level in self._pool_levels.items() if pool not in changed}
        self._publish()

    def remove_worker(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)
        self._pools.pop(worker_id, None)

    def reset_worker(self, worker_id: str) -> None:
        """Forget what a worker showed (it restarted: a new process, cold graphs).

        Its curve becomes its peers' at once (the last refit's pool level): one curve
        recomputed, on the fleet's restart path, never in a decision.
        """
        model = self._workers.get(worker_id)
        if model is not None:
            self._workers[worker_id] = WorkerModel(model.prior)
            self._recompute([worker_id], self._clock())
            self._publish()

    def configure(self, settings: LearningSettings) -> None:
        self.settings = settings
        for model in self._workers.values():
            model.dirty = True

    # --- learning ---------------------------------------------------------------------
    def on_stream_done(self, observation: StreamObservation) -> None:
        """Learn from a completed stream; cut, retried or abandoned ones could mislead."""
        if not self.settings.enabled or observation.outcome is not StreamOutcome.COMPLETED:
            return
        model = self._workers.get(observation.worker_id)
        if model is None:
            return
        now = self._clock()
        prior = model.prior
        dispatch_load = observation.load_at_dispatch
        if observation.ttfp_s is not None and dispatch_load >= 1:
            load = min(dispatch_load, prior.max_load)
            self._add(model.ttfp, load, observation.ttfp_s / prior.ttfp(dispatch_load), 1.0, now)
        for sample in observation.pace:
            if sample.frames <= 0 or sample.load < 1 or sample.seconds <= 0:
                continue
            load = min(sample.load, prior.max_load)
            step = sample.seconds / sample.frames
            # One second of audio counts as one sample.
            self._add(model.step, load, step / prior.step(load), sample.frames / FRAMES_PER_SECOND, now)
        model.dirty = True
        pool = self._pools.get(observation.worker_id)
        if pool is not None:  # its peers lean on what it showed
            self._dirty_pools.add(pool)

    def _add(self, buckets: _Buckets, load: int, ratio: float, weight: float, now: float) -> None:
        settings = self.settings
        if not (1.0 / settings.max_ratio <= ratio <= settings.max_ratio) or not math.isfinite(ratio):
            return  # absurd: a stall, a clock jump, a stream that was not what it seemed
        buckets.add(load - 1, math.log(ratio), weight, now, settings)

    # --- reading: the published snapshot only ---------------------------------------
    def snapshot(self) -> CurveSnapshot:
        """The curves as of the last refit. Never computes anything."""
        return self._published

    def curve(self, worker_id: str) -> Curve | None:
        return self._published.workers.get(worker_id)

    def describe(self, worker_id: str) -> dict[str, object] | None:
        """Prior and published curve side by side, for ``GET /admin/pools``."""
        model = self._workers.get(worker_id)
        curve = self._published.workers.get(worker_id)
        if model is None or curve is None:
            return None
        now = self._clock()
        half_life = self.settings.half_life_s
        step_weights = model.step.decayed(now, half_life)
        ttfp_weights = model.ttfp.decayed(now, half_life)
        points = []
        for load in _display_loads(model.prior.max_load):
            points.append({
                "load": load,
                "prior_rtf": round(model.prior.rtf(load), 4),
                "rtf": round(curve.rtf(load), 4),
                "prior_ttfp_ms": round(model.prior.ttfp(load) * 1000, 1),
                "ttfp_ms": round(curve.ttfp(load) * 1000, 1),
                "step_samples": round(step_weights[load - 1], 2),
                "ttfp_samples": round(ttfp_weights[load - 1], 2),
            })  # fmt: skip
        return {
            "max_load": model.prior.max_load,
            "step_samples": round(sum(step_weights), 2),
            "ttfp_samples": round(sum(ttfp_weights), 2),
            "points": points,
        }

    # --- refitting: off the read path -----------------------------------------------
    async def run(self, loads: Callable[[], LoadView], interval_s: float | None = None) -> None:
        """The background refit: follow the fleet's membership, refit, publish; forever.

        Each pass yields to the event loop every ``RECOMPUTE_PER_STEP`` curves, so requests
        keep flowing while a large fleet learns.
        """
        interval = self.REFRESH_S if interval_s is None else interval_s
        while True:
            self.track(loads())
            await self.refit_in_steps()
            await asyncio.sleep(interval)

    def refit(self) -> CurveSnapshot:
        """One whole refit pass at once, published (tests, tools)."""
        now = self._clock()
        self._recompute(self._start_refit(now), now)
        self._publish()
        return self._published

    async def refit_in_steps(self) -> None:
        for _ in self.refit_steps():
            await asyncio.sleep(0)

    def refit_steps(self) -> Iterator[None]:
        """One refit pass, ``RECOMPUTE_PER_STEP`` curves per ``next`` (the first step also
        finds what is due, the last publishes): the caller yields to the event loop between
        steps (``refit_in_steps``), or times each one (the decision benchmark)."""
        now = self._clock()
        due = self._start_refit(now)
        for start in range(0, len(due), self.RECOMPUTE_PER_STEP):
            if start:
                yield
            self._recompute(due[start : start + self.RECOMPUTE_PER_STEP], now)
        self._publish()

    def _publish(self) -> None:
        """Swap in a new immutable snapshot: readers see the old one or the new one, whole."""
        pools = {}
        for pool, prior in self._priors.items():
            level = self._pool_levels.get(pool)
            if level is None:
                pools[pool] = prior
            else:
                step_level, ttfp_level = level
                steps = [p * math.exp(f) for p, f in zip(prior.step_s, step_level, strict=True)]
                ttfps = [p * math.exp(f) for p, f in zip(prior.ttfp_s, ttfp_level, strict=True)]
                pools[pool] = Curve(tuple(_monotone(steps, [0.0] * len(steps))), tuple(_monotone(ttfps, [0.0] * len(ttfps))))
        self._published = CurveSnapshot.of({w: m.curve for w, m in self._workers.items()}, pools, self._latency_places(pools))

    def _latency_places(self, pools: Mapping[PoolName, Curve]) -> int | None:
        if self._demand is None:
            return None
        ll_workers = sum(1 for pool in self._pools.values() if pool is PoolName.LOW_LATENCY)
        return self._demand.places_needed(self._clock(), pools.get(PoolName.LOW_LATENCY), ll_workers)

    def _start_refit(self, now: float) -> list[str]:
        """The fleet and pool levels from every worker's samples; the changed workers, due
        for theirs."""
        dirty_pools = self._dirty_pools
        if not dirty_pools and not any(model.dirty for model in self._workers.values()):
            return []
        half_life = self.settings.half_life_s
        decayed = {
            worker_id: (model.step.decayed(now, half_life), model.ttfp.decayed(now, half_life))
            for worker_id, model in self._workers.items()
        }
        members: dict[PoolName, list[str]] = {pool: [] for pool in self._priors}
        for worker_id, pool in self._pools.items():
            members.setdefault(pool, []).append(worker_id)
        sums = {
            pool: self._pool_sums(ids, (self._workers[ids[0]].prior if ids else self._priors[pool]).max_load, decayed)
            for pool, ids in members.items()
        }
        fleet = self._fleet_level(sums.values())
        levels: dict[PoolName, tuple[list[float], list[float]]] = {}
        for pool, pool_sums in sums.items():
            level = self._pool_level(pool_sums, fleet)
            old = self._pool_levels.get(pool)
            if pool in dirty_pools or old is None or _moved(old, level):
                levels[pool] = level
                dirty_pools.add(pool)
            else:
                # Only the fleet level moved it, by less than a rounding: its workers keep
                # the level their curves were computed with (no drift builds up unseen).
                levels[pool] = old
        self._pool_levels = levels
        for worker_id, pool in self._pools.items():
            if pool in dirty_pools:
                self._workers[worker_id].dirty = True
        dirty_pools.clear()
        return [worker_id for worker_id, model in self._workers.items() if model.dirty]

    def _recompute(self, worker_ids: list[str], now: float) -> None:
        settings, half_life = self.settings, self.settings.half_life_s
        for worker_id in worker_ids:
            model = self._workers.get(worker_id)
            if model is None:  # left the fleet meanwhile
                continue
            size = model.prior.max_load
            pool = self._pools.get(worker_id)
            level = self._pool_levels.get(pool) if pool is not None else None
            step_base, ttfp_base = level if level is not None else ([0.0] * size, [0.0] * size)
            step_weights, ttfp_weights = model.step.decayed(now, half_life), model.ttfp.decayed(now, half_life)
            step_factors = _corrections(step_weights, model.step.mean, step_base, settings)
            ttfp_factors = _corrections(ttfp_weights, model.ttfp.mean, ttfp_base, settings)
            prior = model.prior
            steps = _monotone([p * f for p, f in zip(prior.step_s, step_factors, strict=True)], step_weights)
            ttfps = _monotone([p * f for p, f in zip(prior.ttfp_s, ttfp_factors, strict=True)], ttfp_weights)
            model.curve = Curve(tuple(steps), tuple(ttfps))
            model.dirty = False

    def _pool_sums(self, members: list[str], size: int, decayed: Mapping[str, tuple[list[float], list[float]]]) -> _Sums:
        """Every member's samples pooled per load, as if one worker had shown them: per
        kind (step, TTFP), the weights and the weighted log corrections."""
        sums = []
        for kind in (0, 1):
            weights, weighted = [0.0] * size, [0.0] * size
            for worker_id in members:
                buckets = self._workers[worker_id].step if kind == 0 else self._workers[worker_id].ttfp
                for index, (w, m) in enumerate(zip(decayed[worker_id][kind], buckets.mean, strict=True)):
                    if w:
                        weights[index] += w
                        weighted[index] += w * m
            sums.append((weights, weighted))
        return sums[0], sums[1]

    def _fleet_level(self, pools: Iterable[_Sums]) -> tuple[float, float]:
        """The fleet's log correction (step, TTFP), one number each: every sample at every
        load of every pool, shrunk toward the prior. Each sample is against its own pool's
        prior, so what they share is how far this hardware (or clock) is off the profiles'
        estimates, not the shape of either curve."""
        weight, weighted = [0.0, 0.0], [0.0, 0.0]
        for sums in pools:
            for kind in (0, 1):
                weight[kind] += sum(sums[kind][0])
                weighted[kind] += sum(sums[kind][1])
        strength = self.settings.prior_strength
        return weighted[0] / (weight[0] + strength), weighted[1] / (weight[1] + strength)

    def _pool_level(self, sums: _Sums, fleet: tuple[float, float]) -> tuple[list[float], list[float]]:
        """The pool's log correction per load (step, TTFP): its pooled samples shrunk toward
        the fleet level like a worker's own toward its pool's. (A worker's own samples count
        here too; against its own evidence they weigh little.) A pool with no samples is the
        fleet level."""
        levels = []
        for kind in (0, 1):
            weights, weighted = sums[kind]
            means = [wm / w if w else 0.0 for w, wm in zip(weights, weighted, strict=True)]
            base = [fleet[kind]] * len(weights)
            levels.append([math.log(f) for f in _corrections(weights, means, base, self.settings)])
        return levels[0], levels[1]


# A pool level that moved less than this (log, ~0.5%) only because other pools learned does
# not recompute its workers' curves: far inside the picker's tie, and a refit stays O(changed).
LEVEL_TOLERANCE = 0.005


def _moved(old: tuple[list[float], list[float]], new: tuple[list[float], list[float]]) -> bool:
    if len(old[0]) != len(new[0]):  # the pool's prior changed size
        return True
    return any(abs(a - b) > LEVEL_TOLERANCE for kind in (0, 1) for a, b in zip(old[kind], new[kind], strict=True))


def _corrections(weights: list[float], means: list[float], base: list[float], settings: LearningSettings) -> list[float]:
    """Multiplicative correction per load: local evidence, shrunk toward the worker's overall
    correction, itself shrunk toward ``base`` (its pool's, per load, in log space)."""
    total = sum(weights)
    if total == 0.0:
        return [math.exp(b) for b in base]
    k = settings.prior_strength
    own = sum(w * m for w, m in zip(weights, means, strict=True))
    size, reach = len(weights), settings.neighbourhood
    # Only loads with samples count, each weighed by 0.5 ** distance (exact powers of two,
    # taken from a table): the same sums, in the same order, as a walk over the whole window.
    halves = [0.5**distance for distance in range(reach + 1)]
    sampled = [(other, w, means[other]) for other, w in enumerate(weights) if w]
    factors = []
    first = 0  # the first sampled load inside the current window
    for index in range(size):
        overall = (own + k * base[index]) / (total + k)
        local_w = local_wm = 0.0
        while first < len(sampled) and sampled[first][0] < index - reach:
            first += 1
        for position in range(first, len(sampled)):
            other, w, mean = sampled[position]
            if other > index + reach:
                break
            w *= halves[other - index if other >= index else index - other]
            local_w += w
            local_wm += w * mean
        factors.append(math.exp((local_wm + k * overall) / (local_w + k)))
    return factors


def _monotone(values: list[float], weights: Iterable[float]) -> list[float]:
    """Weighted isotonic (non-decreasing) fit: pool adjacent violators."""
    if all(a <= b for a, b in zip(values, values[1:])):
        return list(values)  # nothing to pool (the usual case): the fit is the values
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(values, weights, strict=True):
        blocks.append([value, weight + 1.0, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            top = blocks.pop()
            below = blocks[-1]
            w = below[1] + top[1]
            below[0] = (below[0] * below[1] + top[0] * top[1]) / w
            below[1] = w
            below[2] += top[2]
    out: list[float] = []
    for mean, _, count in blocks:
        out.extend([mean] * int(count))
    return out


def _display_loads(max_load: int) -> list[int]:
    loads = {1, 2, 4, 8, 16, 32, 64, max_load}
    return sorted(load for load in loads if load <= max_load)
