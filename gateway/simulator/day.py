"""A compressed day on elastic simulated fleets: the planner in the loop against the alternatives.

``higgs-gateway simulate --day`` replays one seeded, day-shaped trace (a 24-hour day
compressed: quiet night, morning ramp, bursty afternoon, a long high plateau, the evening
fall; hours in ``day_rate``) on these fleets:

- ``planner``: both profiles, sized every tick by the fleet planner from what admission saw;
- ``static-peak``: the planner's answer for the peak traffic, running all day;
- every static mix of up to as many workers (``static_mixes``), all day: the one with the
  fewest GPU-hours on which every class meets its objective 99% of the time is the smallest
  sufficient static fleet, measured rather than taken from the planner's sizing;
- ``ll-saturation`` / ``ht-saturation``: one profile, autoscaled the way llm-d's KEDA recipe
  scales one variant: on a saturation signal (the P90 of each request's TTFP and RTF over
  their SLOs, here `balanced`'s objective), with the HPA's proportional rule
  ``ceil(current x signal)`` and its tolerance.

Every autoscaled fleet gets the same provisioning delay (a new worker serves only after it)
and the same scale-down stabilisation (the HPA's: the highest count asked for within the
window), and drains a worker before releasing its GPU. A request meets its class's objective
when it is served with its TTFP and decode RTF within the planner's objectives for its class.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.bench.client import RequestResult, RequestSpec
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE
from gateway.bench.scenarios import run_open
from gateway.bench.workload import RAMP_MIX, Arrival, text_order
from gateway.config import PlannerConfig
from gateway.worker.profile import load_deploy_profile
from gateway.planner.arrivals import ArrivalMix, ClassArrivals
from gateway.planner.planner import FleetPlanner, size_fleet
from gateway.routing.prior import prior_curve
from gateway.simulator.fleet import SimGateway, SimWorker, WorkerPlan
from gateway.types import PoolName, SlaClass
from gateway.types.curve import audio_seconds_for
from gateway.types.view import RequestInfo

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT
PROFILES = {LL: LL_PROFILE, HT: HT_PROFILE}


# --- the day -----------------------------------------------------------------------------
# A 24-hour day compressed into the run: ``fraction`` of the run is hour ``24 x fraction``
# (a 3600 s run: 150 s per hour). The phases follow a working day's clock, not the results:
#   00-08 night (a third of the day), 08-12 morning ramp, 12-17 bursty afternoon (a batch
#   burst in the first 18 minutes of each hour), 17-22 the long high plateau, 22-24 the
#   evening fall back to the night's level.
NIGHT, RAMP_END, AFTERNOON_END, PLATEAU_END = 8.0, 12.0, 17.0, 22.0  # hours
BURST_H = 0.3  # of each afternoon hour (18 minutes: 30% of the afternoon)


def day_rate(fraction: float) -> float:
    """Share of the peak rate at ``fraction`` of the day (0 .. 1; hour = 24 x fraction)."""
    hour = 24.0 * fraction
    if hour < NIGHT:  # night
        return 0.05
    if hour < RAMP_END:  # morning ramp
        return 0.05 + 0.55 * (hour - NIGHT) / (RAMP_END - NIGHT)
    if hour < AFTERNOON_END:  # bursty afternoon: batch bursts on an ordinary base
        return 1.0 if (hour - RAMP_END) % 1.0 < BURST_H else 0.45
    if hour < PLATEAU_END:  # the long high plateau
        return 0.95
    return 0.95 - 0.90 * (hour - PLATEAU_END) / (24.0 - PLATEAU_END)  # evening, down to the night


def day_trace(duration_s: float, peak_rate: float, seed: int, mix: Sequence[tuple[SlaClass, float]] = RAMP_MIX) -> list[Arrival]:
    """Poisson arrivals following ``day_rate`` (thinning), classes drawn from ``mix``."""
    rng = random.Random(seed)
    total = sum(weight for _, weight in mix)
    arrivals: list[Arrival] = []
    at = 0.0
    while True:
        at += rng.expovariate(peak_rate)
        if at >= duration_s:
            return arrivals
        if rng.random() <= day_rate(at / duration_s):
            pick = rng.random() * total
            chosen = mix[-1][0]
            for sla, weight in mix:
                pick -= weight
                if pick <= 0:
                    chosen = sla
                    break
            arrivals.append(Arrival(at, chosen))


# --- an elastic simulated fleet ---------------------------------------------------------
class ElasticSimGateway(SimGateway):
    """A simulated gateway whose workers come (after a provisioning delay) and go (drained)."""

    def __init__(
        self, initial: Mapping[PoolName, int], objectives: PlannerConfig, on_arrival: Callable[[RequestInfo], None] | None = None
    ) -> None:
        plans = [WorkerPlan(pool, PROFILES[pool]) for pool, n in initial.items() for _ in range(n)]
        super().__init__(plans, on_arrival=on_arrival)
        # Both pools' priors, whichever the fleet starts with: a pool may grow from nothing.
        self.performance.set_priors({pool: prior_curve(load_deploy_profile(p)) for pool, p in PROFILES.items()})
        self.objectives = objectives.objectives
        self.draining: set[str] = set()
        self.outcomes: list[tuple[float, SlaClass, bool, float]] = []  # (end, class, met, ratio)
        self._next_id = len(self.workers)

    def count(self, pool: PoolName, serving_only: bool = False) -> int:
        """Workers of ``pool`` holding a GPU and not draining (or, with ``serving_only``, routable)."""
        return sum(
            1 for worker_id, worker in self.workers.items()
            if worker.pool is pool and worker_id not in self.draining and (worker.routable or not serving_only)
        )  # fmt: skip

    def gpus(self) -> dict[PoolName, int]:
        return {pool: sum(1 for w in self.workers.values() if w.pool is pool) for pool in PROFILES}

    def provision(self, pool: PoolName, delay_s: float) -> None:
        worker_id = f"{pool.value}-{self._next_id}"
        self._next_id += 1
        worker = SimWorker(worker_id, WorkerPlan(pool, PROFILES[pool]), self._loop)
        worker.routable = False
        self.workers[worker_id] = worker

        def ready() -> None:
            if worker_id in self.workers and worker_id not in self.draining:
                worker.routable = True
                self.admission.capacity_changed()

        self._loop.call_later(delay_s, ready)

    def drain(self, pool: PoolName) -> None:
        """Take one worker of ``pool`` out: one still provisioning first, else the least loaded."""
        candidates = [w for w_id, w in self.workers.items() if w.pool is pool and w_id not in self.draining]
        if not candidates:
            return
        worker = min(candidates, key=lambda w: (w.routable, w.inflight))
        self.draining.add(worker.worker_id)
        worker.routable = False

    def release_drained(self) -> None:
        for worker_id in [w for w in self.draining if self.workers[w].inflight == 0]:
            self.draining.discard(worker_id)
            del self.workers[worker_id]

    async def speak(self, spec: RequestSpec, phase_start: float) -> RequestResult:
        result = await super().speak(spec, phase_start)
        sla = spec.sla_class or SlaClass.BALANCED
        self.outcomes.append((self._loop.time(), sla, *self._judge(sla, result)))
        return result

    def _judge(self, sla: SlaClass, result: RequestResult) -> tuple[bool, float]:
        """Whether the request met its class's objective, and the worse of its two ratios to it."""
        objective = self.objectives[sla]
        audio_s = result.audio_s
        if result.status != 200 or result.ttfp_s is None or result.e2e_s is None or audio_s <= 0:
            return False, math.inf
        rtf = (result.e2e_s - result.ttfp_s) / audio_s
        ratio = rtf / objective.rtf
        if objective.ttfp_s is not None:
            ratio = max(ratio, result.ttfp_s / objective.ttfp_s)
        return ratio <= 1.0, ratio


# --- the controllers ---------------------------------------------------------------------
Controller = Callable[[ElasticSimGateway, float], Mapping[PoolName, int] | None]


def planner_controller(planner: FleetPlanner) -> Controller:
    def desired(gateway: ElasticSimGateway, now: float) -> Mapping[PoolName, int] | None:
        planner.plan()
        wanted = planner.desired_workers()
        return None if wanted is None else {PoolName(pool): n for pool, n in wanted.items()}

    return desired


def saturation_controller(pool: PoolName, window_s: float, maximum: int, tolerance: float = 0.1) -> Controller:
    """llm-d's recipe for one variant: scale on P90 of the requests' objective ratios (over 1: saturated)."""

    def desired(gateway: ElasticSimGateway, now: float) -> Mapping[PoolName, int] | None:
        ratios = sorted(ratio for end, _, _, ratio in gateway.outcomes if end >= now - window_s)
        current = max(1, gateway.count(pool))
        if not ratios:
            return {pool: current}
        signal = ratios[min(len(ratios) - 1, int(0.9 * len(ratios)))]
        if abs(signal - 1.0) <= tolerance:
            return {pool: current}
        wanted = current * 2 if math.isinf(signal) else math.ceil(current * signal)
        return {pool: min(maximum, max(1, wanted))}

    return desired


@dataclass
class DaySetup:
    name: str
    summary: str
    initial: dict[PoolName, int]
    controller: Controller | None  # None: static


@dataclass
class DayOptions:
    duration_s: float = 3600.0
    peak_rate: float = 10.0
    seed: int = 0
    provision_delay_s: float = 60.0
    tick_s: float = 10.0
    stabilisation_s: float = 120.0
    window_s: float = 60.0  # the saturation signal's window
    maximum: int = 16
    # None: smoothing 60 s, forecasting the rate one provisioning delay ahead (the time a
    # worker asked for now takes to serve).
    planner: PlannerConfig = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.planner is None:
            self.planner = PlannerConfig(smoothing_s=60.0, min_requests=5.0, forecast_s=self.provision_delay_s)


def peak_mix(options: DayOptions, texts: Sequence[str]) -> dict[PoolName, int]:
    """The smallest static mix meeting the objectives at the day's peak (the planner's sizing)."""
    total = sum(weight for _, weight in RAMP_MIX)
    audio_s = sum(audio_seconds_for(len(t)) for t in texts) / len(texts)
    classes = {sla: ClassArrivals(options.peak_rate * w / total, audio_s, 1e6) for sla, w in RAMP_MIX}
    curves = {pool: prior_curve(load_deploy_profile(p)) for pool, p in PROFILES.items()}
    return dict(size_fleet(options.planner, curves, ArrivalMix(classes, 1.0)).workers)


def setups(options: DayOptions, texts: Sequence[str]) -> list[DaySetup]:
    peak = peak_mix(options, texts)
    sat = options.window_s
    return [
        DaySetup("planner", "both profiles, sized by the fleet planner", {LL: 1, HT: 0}, None),
        DaySetup("static-peak", f"{peak[LL]} LL + {peak[HT]} HT all day (the planner's mix at peak)", peak, None),
        DaySetup("ll-saturation", "low-latency only, autoscaled on saturation", {LL: 1, HT: 0},
                 saturation_controller(LL, sat, options.maximum)),
        DaySetup("ht-saturation", "high-throughput only, autoscaled on saturation", {LL: 0, HT: 1},
                 saturation_controller(HT, sat, options.maximum)),
    ]  # fmt: skip


def static_mixes(peak: Mapping[PoolName, int]) -> list[dict[PoolName, int]]:
    """Every static mix of up to as many workers as the peak sizing (fewest first): which of
    them truly meets the objectives all day is measured, not assumed from the sizing."""
    return [{LL: ll, HT: total - ll} for total in range(1, sum(peak.values()) + 1) for ll in range(total, -1, -1)]


def sufficient(result: Mapping[str, Any], share: float = 0.99) -> bool:
    """Every class that came met its objective at least ``share`` of the time."""
    return all(met is None or met >= share for met in result["attainment"].values())


def smallest_sufficient(results: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The static mix run with the fewest GPU-hours that meets every objective (ties: the most met)."""
    meeting = [r for r in results if r.get("static_sweep") and sufficient(r)]
    return min(meeting, key=lambda r: (r["gpu_hours"], -(r["overall"] or 0.0)), default=None)


async def run_day(setup: DaySetup, options: DayOptions, arrivals: Sequence[Arrival], texts: Sequence[str]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    controller = setup.controller
    planner = None
    if controller is None and setup.name == "planner":
        # Wired as create_app wires it: arrivals counted at admission, curves from the model.
        planner = FleetPlanner(options.planner, lambda: gateway.performance.snapshot(), loop.time)
        controller = planner_controller(planner)
    gateway = ElasticSimGateway(setup.initial, options.planner, planner.record_arrival if planner else None)
    timeline: list[dict[str, Any]] = []
    asked: deque[tuple[float, dict[PoolName, int]]] = deque()
    gpu_seconds = 0.0
    done = asyncio.Event()

    async def control() -> None:
        nonlocal gpu_seconds
        seen = 0
        while not done.is_set():
            await asyncio.sleep(options.tick_s)
            now = loop.time()
            gateway.release_drained()
            gpus = gateway.gpus()
            gpu_seconds += sum(gpus.values()) * options.tick_s
            recent = gateway.outcomes[seen:]
            seen = len(gateway.outcomes)
            timeline.append({
                "t": round(now, 1), "gpus": {p.value: n for p, n in gpus.items()},
                "served": len(recent),
                "met": {sla.value: _share([m for _, c, m, _ in recent if c is sla]) for sla in SlaClass},
            })  # fmt: skip
            wanted = controller(gateway, now) if controller is not None else None
            if wanted is None:
                continue
            asked.append((now, dict(wanted)))
            while asked and asked[0][0] < now - options.stabilisation_s:
                asked.popleft()
            for pool in PROFILES:
                target = wanted.get(pool, 0)
                current = gateway.count(pool)
                if target > current:
                    for _ in range(target - current):
                        gateway.provision(pool, options.provision_delay_s)
                else:
                    # Scale down only to the most asked for within the stabilisation window.
                    floor = max(a.get(pool, 0) for _, a in asked)
                    for _ in range(current - max(target, floor)):
                        gateway.drain(pool)

    control_task = loop.create_task(control())
    specs = [RequestSpec(text, a.sla_class) for text, a in zip(texts, arrivals, strict=True)]
    await run_open(gateway, specs, arrivals, setup.name, clock=loop.time)
    done.set()
    await control_task
    outcomes = gateway.outcomes
    return {
        "setup": setup.name,
        "summary": setup.summary,
        "requests": len(outcomes),
        "attainment": {sla.value: _share([m for _, c, m, _ in outcomes if c is sla]) for sla in SlaClass},
        "overall": _share([m for _, _, m, _ in outcomes]),
        "gpu_hours": round(gpu_seconds / 3600.0, 3),
        "timeline": timeline,
    }


def _share(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


# --- the whole comparison, its report and plot --------------------------------------
def compare_day(options: DayOptions) -> tuple[list[dict[str, Any]], list[Arrival]]:
    """Every setup through the same day; results in setup order, and the trace."""
    from gateway.simulator.loop import run_virtual

    arrivals = day_trace(options.duration_s, options.peak_rate, options.seed)
    texts = text_order(len(arrivals), options.seed)
    results = [run_virtual(run_day(setup, options, arrivals, texts)) for setup in setups(options, texts)]
    for mix in static_mixes(peak_mix(options, texts)):
        name = f"{mix[LL]} LL + {mix[HT]} HT"
        result = run_virtual(run_day(DaySetup(name, f"{name} all day", mix, None), options, arrivals, texts))
        results.append({**result, "static_sweep": True, "workers": {pool.value: n for pool, n in mix.items()}})
    return results, arrivals


def render_day(results: Sequence[dict[str, Any]], options: DayOptions, command: str) -> list[str]:
    static = next(r for r in results if r["setup"] == "static-peak")
    smallest = smallest_sufficient(results)
    sweep = [r for r in results if r.get("static_sweep")]
    objectives = options.planner.objectives
    lines = [
        "# The planner in the loop: one simulated day",
        "",
        f"Reproduce: `{command}`",
        "",
        f"A 24-hour day compressed into {options.duration_s:.0f} s ({options.duration_s / 24:g} s per hour; seed {options.seed}, "
        f"peak {options.peak_rate:g} requests/s, classes 20% latency, 50% balanced, 30% throughput): quiet night "
        "00-08 h, morning ramp 08-12 h, bursty afternoon 12-17 h (a batch burst in the first 18 minutes of each hour), "
        "the long high plateau 17-22 h, the evening fall 22-24 h. Autoscaled fleets: a new worker serves "
        f"{options.provision_delay_s:g} s after it is asked for; scale-down waits {options.stabilisation_s:g} s "
        f"(the highest count asked within it), a worker drains before its GPU is released; decisions every {options.tick_s:g} s.",
        "",
        "A request meets its class's objective when it is served with TTFP and decode RTF within: "
        + "; ".join(f"`{sla.value}` RTF ≤ {o.rtf:g}" + (f", TTFP ≤ {o.ttfp_s:g} s" if o.ttfp_s else "") for sla, o in objectives.items())
        + ". The saturation autoscalers scale on the P90 of each request's worse ratio to its objective.",
        "",
        f"The planner: smoothing {options.planner.smoothing_s:g} s, the rate forecast {options.planner.forecast_s:g} s ahead "
        f"(its trend), at least {options.planner.min_requests:g} requests to judge, target utilisation "
        f"{options.planner.target_utilisation:g}, pools 0-{options.maximum}, `latency` on low-latency only. "
        "The smallest sufficient static fleet is measured: every static mix of up to as many workers as the "
        "planner's peak sizing runs the same day (below), and the one with the fewest GPU-hours on which every "
        "class meets its objective at least 99% of the time is the reference.",
        "",
        "| setup | fleet | latency | balanced | throughput | all | GPU-hours | vs static-peak | vs smallest sufficient static |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in [r for r in results if not r.get("static_sweep")]:
        lines.append(_row(r, r["summary"], static, smallest))
    lines += [
        "",
        f"Every static mix of up to {max((sum(r['workers'].values()) for r in sweep), default=0)} workers "
        "(as many as the planner's peak sizing), all day "
        f"(meets: every class ≥ 99%). Smallest sufficient: "
        + (f"**{smallest['setup']}** ({smallest['gpu_hours']:.3f} GPU-hours)." if smallest else "none of them."),
        "",
        "| static mix | latency | balanced | throughput | all | GPU-hours | meets |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sweep:
        a = r["attainment"]
        lines.append(
            f"| {r['setup']} | {_pct(a['latency'])} | {_pct(a['balanced'])} | {_pct(a['throughput'])} | {_pct(r['overall'])} "
            f"| {r['gpu_hours']:.3f} | {'yes' if sufficient(r) else 'no'} |"
        )
    return lines


def _row(r: Mapping[str, Any], summary: str, static: Mapping[str, Any], smallest: Mapping[str, Any] | None) -> str:
    a = r["attainment"]
    versus = [f"{r['gpu_hours'] / ref['gpu_hours'] - 1:+.0%}" if ref and ref["gpu_hours"] else "–" for ref in (static, smallest)]
    return (
        f"| {r['setup']} | {summary} | {_pct(a['latency'])} | {_pct(a['balanced'])} | {_pct(a['throughput'])} "
        f"| {_pct(r['overall'])} | {r['gpu_hours']:.3f} | {versus[0]} | {versus[1]} |"
    )


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{share:.1%}"


def plot_day(results: Sequence[dict[str, Any]], arrivals: Sequence[Arrival], options: DayOptions, out_dir: Any) -> Any:
    """Load, workers per pool and the share of requests meeting their objective, over the day."""
    from gateway.bench.report import _pyplot

    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    figure, (load, workers, met) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    tick = options.tick_s
    buckets = [0] * (int(options.duration_s // tick) + 1)
    for arrival in arrivals:
        buckets[int(arrival.at_s // tick)] += 1
    load.plot([i * tick for i in range(len(buckets))], [n / tick for n in buckets], color="grey")
    load.set_ylabel("arrivals / s")
    for index, r in enumerate([r for r in results if not r.get("static_sweep")]):
        color = f"C{index}"  # one colour per setup in both panels
        times = [row["t"] for row in r["timeline"]]
        if r["setup"] == "planner":
            for pool, style in ((LL, ":"), (HT, "--")):
                workers.plot(times, [row["gpus"][pool.value] for row in r["timeline"]], style, color=color,
                             alpha=0.6, label=f"planner {pool.value}")  # fmt: skip
        workers.plot(times, [sum(row["gpus"].values()) for row in r["timeline"]], color=color, label=f"{r['setup']} (all)")
        shares = []
        for row in r["timeline"]:
            values = [v for v in row["met"].values() if v is not None]
            shares.append(min(values) if values else None)
        met.plot(times, [s if s is not None else float("nan") for s in shares], color=color, label=r["setup"])
    workers.set_ylabel("workers (GPUs)")
    workers.legend(fontsize=7)
    met.set_ylabel("worst class: share meeting\nits objective (per tick)")
    met.set_xlabel("seconds into the compressed day")
    met.legend(fontsize=7)
    path = out_dir / "day-timeline.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
