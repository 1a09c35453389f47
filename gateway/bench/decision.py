"""How long one routing decision takes: ``higgs-gateway bench decision``.

The policy runs on the event loop for every request (and again for queued ones whenever
capacity changes), so its cost is per-request overhead. This times ``decide`` alone on a
realistic view: half low-latency and half high-throughput workers with prior curves,
loads spread over their range, every SLA class in turn.

Then, with every one of 64 workers learning (stream observations arriving all the time
and the background refit running on the same event loop, as in the gateway), it times
each decision on its own, view included, and reports the median beside the worst: a
decision only reads the published curves, so none waits on a refit.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Callable

from gateway.config import AdmissionConfig, RoutingConfig, RoutingThresholds
from gateway.worker.profile import load_deploy_profile
from gateway.routing import core as routing_core
from gateway.routing.performance import PerformanceModel
from gateway.routing.policy import create_policy
from gateway.routing.prior import prior_curve
from gateway.types import PoolName, SlaClass
from gateway.types.observations import PaceSample, StreamObservation
from gateway.types.view import LoadView, RequestInfo, WorkerLoad


def fleet_view(workers: int, seed: int = 0) -> LoadView:
    rng = random.Random(seed)
    ll = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_low_latency"))
    ht = prior_curve(load_deploy_profile("higgs_multimodal_qwen3_high_throughput"))
    loads = []
    for index in range(workers):
        pool, curve = (PoolName.LOW_LATENCY, ll) if index % 2 == 0 else (PoolName.HIGH_THROUGHPUT, ht)
        load = rng.randint(0, curve.max_load - 1)
        loads.append(WorkerLoad(f"{pool.value}-{index}", pool, True, load, None, curve.max_load, curve))
    return LoadView(tuple(loads))


def time_decisions(workers: int, rounds: int = 2000, repeats: int = 7, policy_name: str = "adaptive") -> dict[str, tuple[float, float]]:
    """(best, median) microseconds per decision over ``repeats`` runs, per class.

    The best run is the cost of the code (``timeit``'s advice: slower runs measure what
    else the machine did); the median shows how much a busy or throttled machine adds.
    """
    policy = create_policy(policy_name)  # type: ignore[arg-type]
    view, thresholds = fleet_view(workers), RoutingThresholds()
    result = {}
    for sla in SlaClass:
        request = RequestInfo(sla, None, 240)
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(rounds):
                policy.decide(request, view, thresholds)
            samples.append((time.perf_counter() - started) / rounds * 1e6)
        result[sla.value] = (min(samples), statistics.median(samples))
    return result


async def _decisions_while_learning(
    workers: int, decisions: int, policy_name: str, learning: bool = True
) -> tuple[list[float], list[float], list[float]]:
    """Microseconds per single decide, per view + decide, and per refit step; with ``learning``
    off, the same loop without observations or refit (the machine's own noise)."""
    view = fleet_view(workers)
    priors = {w.pool: w.curve for w in view.workers if w.curve is not None}
    loop = asyncio.get_running_loop()
    loads = LoadView(tuple(WorkerLoad(w.worker_id, w.pool, True, w.load, None, w.slots) for w in view.workers))
    policy = create_policy(policy_name)  # type: ignore[arg-type]
    # The gateway's routing core over that fleet; decisions are timed on its view, no slot is taken.
    core = routing_core.build(
        RoutingConfig(), AdmissionConfig(), lambda: loads, _no_slot, loop.time,
        priors=priors, any_routable=lambda: True, policy=policy,
    )  # fmt: skip
    performance, snapshot, thresholds = core.performance, core.snapshot, RoutingThresholds()
    rng = random.Random(1)
    steps: list[float] = []
    performance.track(loads)
    performance.refit()
    refit = asyncio.create_task(_timed_refits(performance, lambda: loads, steps)) if learning else None
    decide_times: list[float] = []
    times: list[float] = []
    classes = list(SlaClass)
    try:
        for index in range(decisions):
            worker = view.workers[index % workers]
            if learning:
                # Every worker keeps showing a slightly different speed: every curve is due at every refit.
                step = worker.curve.step(4) * rng.uniform(0.7, 1.3)  # type: ignore[union-attr]
                pace = tuple(PaceSample(4, 25, 25 * step) for _ in range(4))
                performance.on_stream_done(StreamObservation(worker.worker_id, worker.pool, 4, None, pace))
            request = RequestInfo(classes[index % 3], None, 240)
            started = time.perf_counter()
            current = snapshot()
            built = time.perf_counter()
            policy.decide(request, current, thresholds)
            done = time.perf_counter()
            decide_times.append((done - built) * 1e6)
            times.append((done - started) * 1e6)
            await asyncio.sleep(0)  # the refit runs between decisions, as on the gateway's loop
    finally:
        if refit is not None:
            refit.cancel()
    return decide_times, times, steps


_PASS_DONE = object()


def _no_slot(worker_id: str) -> None:
    raise AssertionError("the decision benchmark never admits a request")


async def _timed_refits(performance: PerformanceModel, loads: Callable[[], LoadView], steps: list[float]) -> None:
    """The gateway's background refit (``PerformanceModel.run`` with no pause between
    passes), each step timed: what a decision may wait behind on the same event loop."""
    while True:
        performance.track(loads())
        passing = performance.refit_steps()
        done = False
        while not done:
            started = time.perf_counter()
            done = next(passing, _PASS_DONE) is _PASS_DONE
            steps.append((time.perf_counter() - started) * 1e6)
            await asyncio.sleep(0)


def time_decisions_while_learning(
    workers: int = 64, decisions: int = 5000, policy_name: str = "adaptive", learning: bool = True
) -> dict[str, float]:
    """Median, p99 and worst single decision (µs; ``decide`` alone and with the view built),
    and the refit steps (count, longest in µs) the event loop ran between two decisions."""
    decide_times, times, steps = asyncio.run(_decisions_while_learning(workers, decisions, policy_name, learning))
    result: dict[str, float] = {"refit_steps": len(steps), "longest_refit_step": max(steps, default=0.0)}
    for name, samples in (("decide", decide_times), ("view_decide", times)):
        ordered = sorted(samples)
        result[f"{name}_median"] = statistics.median(ordered)
        result[f"{name}_p99"] = ordered[int(0.99 * (len(ordered) - 1))]
        result[f"{name}_worst"] = ordered[-1]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="higgs-gateway bench decision", description=__doc__)
    parser.add_argument("--workers", default="2,64", help="fleet sizes, comma-separated")
    parser.add_argument("--policy", default="adaptive")
    args = parser.parse_args(argv)
    print("µs per decision, best / median of 7 runs of 2000 decisions")
    print()
    print("| workers | latency (µs) | balanced (µs) | throughput (µs) |")
    print("|---:|---:|---:|---:|")
    for size in (int(n) for n in args.workers.split(",")):
        t = time_decisions(size, policy_name=args.policy)
        cells = " | ".join(f"{t[sla][0]:.1f} / {t[sla][1]:.1f}" for sla in ("latency", "balanced", "throughput"))
        print(f"| {size} | {cells} |")
    print()
    print("64 workers, 5000 decisions timed one by one, classes in turn, on one event loop. Learning:")
    print("an observation before every decision and the background refit running between decisions;")
    print("idle: the same loop with neither (what the machine itself adds). µs, median / p99 / worst:")
    print()
    print("| run | decide | view + decide | refit steps in between | longest refit step (µs) |")
    print("|---|---:|---:|---:|---:|")
    for label, learning in (("learning", True), ("idle", False)):
        t = time_decisions_while_learning(policy_name=args.policy, learning=learning)
        cells = " | ".join(f"{t[f'{n}_median']:.1f} / {t[f'{n}_p99']:.1f} / {t[f'{n}_worst']:.0f}" for n in ("decide", "view_decide"))
        print(f"| {label} | {cells} | {t['refit_steps']:.0f} | {t['longest_refit_step']:.0f} |")
    return 0
