"""Routing decisions and request rows of a few small simulated runs, for the golden test.

Every setup runs the simulator's warm-up, a closed-loop sweep and a bursty trace for two
seeds; each routing decision (in the order the policy made it, with the request it
answered) and each request's outcome becomes one row. Virtual time makes the rows exact,
so any change in what routing decides shows up as a changed row.

Regenerate (only when a routing change is deliberate, and say so in the commit):

    python -m tests.unit.simulator.golden_rows
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gateway.bench.client import ClientOptions
from gateway.bench.compare import SETUPS, Setup
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE
from gateway.bench.scenarios import RunOptions, sweep, trace, warm_up
from gateway.bench.workload import bursty
from gateway.config import RoutingThresholds
from gateway.routing.policy import RoutingPolicy, create_policy
from gateway.simulator.fleet import SimGateway
from gateway.simulator.loop import run_virtual
from gateway.simulator.runs import plans_for
from gateway.types.decision import Decision
from gateway.types.view import LoadView, RequestInfo

GOLDEN = Path(__file__).with_name("golden_routing_rows.json")
SEEDS = (0, 1)
LEVELS = (1, 8)
REQUESTS = 16  # per sweep level
BURSTY = {"duration_s": 30.0, "latency_rate": 1.0, "burst_rate": 6.0, "on_s": 10.0, "off_s": 15.0}
LEAST_LOADED = Setup("least_loaded", "least_loaded", (LL_PROFILE, HT_PROFILE), summary="1 low-latency + 1 high-throughput")
NAMES = ("adaptive", "rules", "round_robin", "ht+ht")
GOLDEN_SETUPS = (*(s for s in SETUPS if s.name in NAMES), LEAST_LOADED)


class _Recording:
    """The policy, unchanged, writing down every answer it gives."""

    def __init__(self, policy: RoutingPolicy, rows: list[list[Any]], clock: Any) -> None:
        self.name = policy.name
        self._policy, self._rows, self._clock = policy, rows, clock

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision:
        d = self._policy.decide(request, view, thresholds)
        self._rows.append([
            _r(self._clock()), request.sla_class.value, request.waited_out, sorted(request.tried),
            d.action.value, d.reason, d.worker_id, _r(d.predicted_ttfp_s), _r(d.predicted_rtf),
        ])  # fmt: skip
        return d


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 9)


async def _run(setup: Setup, seed: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    decisions: list[list[Any]] = []
    gateway = SimGateway(plans_for(setup), _Recording(create_policy(setup.policy), decisions, loop.time))  # type: ignore[arg-type]
    options = RunOptions(ClientOptions(url="simulated"), setup.name, seed=seed, progress=False,
                         make_client=lambda: gateway, clock=loop.time)  # fmt: skip
    await warm_up(options, max(LEVELS))
    documents = [await sweep(options, LEVELS, REQUESTS)]
    arrivals = bursty(BURSTY["duration_s"], seed, BURSTY["latency_rate"], BURSTY["burst_rate"], BURSTY["on_s"], BURSTY["off_s"])
    documents.append(await trace(options, arrivals, "bursty", {"kind": "bursty", **BURSTY}))
    phases = [phase for document in documents for phase in document["phases"]]
    return {"setup": setup.name, "seed": seed, "decisions": decisions, "phases": [_phase(p) for p in phases]}


def _phase(phase: dict[str, Any]) -> dict[str, Any]:
    keep = ("name", "sent", "ok", "errors", "pools", "wall_s", "audio_s", "ttfp_s", "e2e_s", "rtf")
    return json.loads(json.dumps({k: phase[k] for k in keep if k in phase}), parse_float=lambda s: round(float(s), 9))


def generate() -> list[dict[str, Any]]:
    return [run_virtual(_run(setup, seed)) for setup in GOLDEN_SETUPS for seed in SEEDS]


def render(runs: list[dict[str, Any]]) -> str:
    """One decision per line: a changed decision is a one-line diff."""
    lines = ["["]
    for i, run in enumerate(runs):
        head = {k: run[k] for k in ("setup", "seed", "phases")}
        lines.append(f' {{"run": {json.dumps(head, sort_keys=True)},')
        lines.append('  "decisions": [')
        lines += [f"   {json.dumps(row)}{',' if j < len(run['decisions']) - 1 else ''}" for j, row in enumerate(run["decisions"])]
        lines.append(f"  ]}}{',' if i < len(runs) - 1 else ''}")
    lines.append("]")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    GOLDEN.write_text(render(generate()))
    print(f"wrote {GOLDEN}")
