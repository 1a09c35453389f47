"""One setup through the compare benchmark's steps (warm-up, sweep, traces) on simulated workers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gateway.bench.client import ClientOptions
from gateway.bench.compare import Setup
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE
from gateway.bench.scenarios import RunOptions, sweep, trace, warm_up
from gateway.bench.targets import RUN_ID, new_run_id
from gateway.bench.workload import TEXTS, Arrival
from gateway.config import AdmissionConfig, RoutingThresholds
from gateway.simulator.fleet import SimGateway, WorkerPlan
from gateway.simulator.replicas import SimReplicas, ViewModel
from gateway.types import PoolName

PROFILE_POOLS = {LL_PROFILE: PoolName.LOW_LATENCY, HT_PROFILE: PoolName.HIGH_THROUGHPUT}


def plans_for(setup: Setup) -> list[WorkerPlan]:
    return [
        WorkerPlan(PROFILE_POOLS[p], p, slots_per_worker=setup.ll_slots if PROFILE_POOLS[p] is PoolName.LOW_LATENCY else None)
        for p in setup.profiles
    ]


async def simulate(
    setup: Setup,
    levels: Sequence[int],
    requests: int | None,
    traces: Sequence[tuple[Sequence[Arrival], dict[str, Any]]],
    seed: int,
    thresholds: RoutingThresholds | None = None,
    plans: Sequence[WorkerPlan] | None = None,
    run_id: str | None = None,
    admission: AdmissionConfig | None = None,
    rounds: int = 4,
    minimum: int = 32,
    replica_view: ViewModel = "shared",
    texts: Sequence[str] = TEXTS,
) -> list[dict[str, Any]]:
    """One setup through the compare benchmark's steps: warm-up, sweep, traces."""
    gateway: SimGateway | SimReplicas
    label, summary = setup.name, setup.summary
    if setup.replicas > 1:
        gateway = SimReplicas(plans or plans_for(setup), setup.replicas, replica_view, setup.policy, thresholds, admission)  # type: ignore[arg-type]
        if replica_view == "reports":
            label, summary = f"{label}-reports", f"{summary}; each sees the others only in the workers' reports"
    else:
        gateway = SimGateway(plans or plans_for(setup), setup.policy, thresholds, admission)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    options = RunOptions(
        ClientOptions(url="simulated"), label, seed=seed, progress=False,
        notes={"setup": summary, "policy": setup.policy, "simulated": True, RUN_ID: run_id or new_run_id()},
        make_client=lambda: gateway, clock=loop.time, texts=texts,
    )  # fmt: skip
    documents = []
    if levels:
        await warm_up(options, max(levels))
        documents.append(await sweep(options, levels, requests, rounds=rounds, minimum=minimum))
    for arrivals, params in traces:
        documents.append(await trace(options, arrivals, params["kind"], params))
    return documents
