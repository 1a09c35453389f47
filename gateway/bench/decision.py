"""How long one routing decision takes: ``python -m gateway.bench.decision``.

The policy runs on the event loop for every request (and again for queued ones whenever
capacity changes), so its cost is per-request overhead. This times ``decide`` alone on a
realistic view: half low-latency and half high-throughput workers with prior curves,
loads spread over their range, every SLA class in turn.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from gateway.config import RoutingThresholds
from gateway.deploy_profile import load_deploy_profile
from gateway.routing.model import PolicyState
from gateway.routing.policy import create_policy
from gateway.routing.prior import prior_curve
from gateway.types import PoolName, SlaClass
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
    view, thresholds, state = fleet_view(workers), RoutingThresholds(), PolicyState()
    result = {}
    for sla in SlaClass:
        request = RequestInfo(sla, None, 240)
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(rounds):
                policy.decide(request, view, thresholds, state)
            samples.append((time.perf_counter() - started) / rounds * 1e6)
        result[sla.value] = (min(samples), statistics.median(samples))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.decision", description=__doc__)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
