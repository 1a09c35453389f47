"""What one low-latency + one high-throughput worker can deliver at best, from one-worker runs.

The routing targets hold `adaptive` (1 LL + 1 HT) to a share of the better static
two-worker fleet. Where that share is above what the mixed fleet can physically deliver,
no policy meets it. This module measures the bound on the same simulator, texts and seed:

- a closed-loop sweep of **one** worker of each profile at every load ``1..max_num_seqs``
  (its steady-state delivered audio-seconds per second at ``n`` requests at once);
- at each concurrency ``c``, the **best split**: ``n`` requests on the low-latency worker and
  ``c - n`` on the high-throughput one, whichever ``n`` delivers the most;
- against the **best static fleet** from the same one-worker runs: two workers of one
  profile with ``c / 2`` each.

The ratio is the ceiling of `adaptive / best static` (a policy that moves requests between
the workers as they finish can only match the best fixed split in a closed loop, not beat
it by more than noise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.bench.compare import Setup
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE
from gateway.bench.workload import TEXTS
from gateway.routing.prior import pool_priors
from gateway.worker.profile import load_deploy_profile
from gateway.simulator.fleet import WorkerPlan
from gateway.simulator.loop import run_virtual
from gateway.simulator.runs import simulate
from gateway.types import PoolName
from gateway.worker.timing import StepModel, TimingParams


# Requests per load = this many times the load: long enough that the last clips' tail
# (one worker draining alone) hardly counts, so the rates are the worker's steady state.
STEADY_ROUNDS = 12
# ...and never fewer than this many: at loads 1-8, twelve rounds are 32-96 clips, and the
# best split is a maximum over splits, so the luck of a few long or short clips at one
# load becomes the ceiling (on the long mix, seed 3: c8's best split read 7 + 1 at 93.2%
# of the better static fleet, where runs three times as long read 4 + 4 at 90.4%).
STEADY_MINIMUM = 192


@dataclass(frozen=True, slots=True)
class CeilingRow:
    concurrency: int
    ll_share: int  # requests on the low-latency worker in the best split
    best_split: float  # audio-s/s of 1 LL + 1 HT in that split
    best_static: float  # audio-s/s of the better of 2 LL and 2 HT, c/2 each
    static_fleet: str  # which one

    @property
    def ratio(self) -> float:
        return self.best_split / self.best_static if self.best_static else 0.0


def c2_rtf_bound() -> float:
    """The least c2 RTF mean of 1 LL + 1 HT over ll+ll's, from the profiles' prior curves.

    ll+ll runs each of two requests alone on a low-latency worker. The mixed fleet either
    runs both on its low-latency worker (its load-2 RTF) or one on each worker (one at the
    high-throughput profile's RTF): no policy does better than the lesser of the two.
    """
    curves = pool_priors({PoolName.LOW_LATENCY: load_deploy_profile(LL_PROFILE),
                          PoolName.HIGH_THROUGHPUT: load_deploy_profile(HT_PROFILE)})  # fmt: skip
    ll, ht = curves[PoolName.LOW_LATENCY].rtf_s, curves[PoolName.HIGH_THROUGHPUT].rtf_s
    return min(ll[1], (ll[0] + ht[0]) / 2) / ll[0]


def max_load(profile: str) -> int:
    return StepModel(load_deploy_profile(profile), TimingParams()).max_num_seqs


async def one_worker_rates(
    profile: str, pool: PoolName, loads: Sequence[int], seed: int, texts: Sequence[str] = TEXTS
) -> dict[int, float]:
    """Audio-s/s of one worker of ``profile`` in a closed loop at each of ``loads``."""
    plans = [WorkerPlan(pool, profile, slots_per_worker=max_load(profile))]
    policy = "low_latency_only" if pool is PoolName.LOW_LATENCY else "high_throughput_only"
    setup = Setup(f"1 {pool.value}", policy, (profile, profile))
    documents = await simulate(setup, loads, None, [], seed, plans=plans, rounds=STEADY_ROUNDS, minimum=STEADY_MINIMUM, texts=texts)
    return {phase["concurrency"]: phase["audio_s_per_s"] for phase in documents[0]["phases"]}


def needed_loads(levels: Sequence[int], ll_max: int, ht_max: int) -> tuple[list[int], list[int]]:
    """The one-worker loads the best splits and static fleets at ``levels`` read."""
    ll: set[int] = set()
    ht: set[int] = set()
    for c in levels:
        for n in range(0, min(c, ll_max) + 1):
            if n:
                ll.add(n)
            if c - n:
                ht.add(min(c - n, ht_max))
        half = max(1, c // 2)
        ll.add(min(half, ll_max))
        ht.add(min(half, ht_max))
    return sorted(ll), sorted(ht)


def ceiling_rows(levels: Sequence[int], ll: dict[int, float], ht: dict[int, float]) -> list[CeilingRow]:
    """The best split and the best static fleet at each level, from one-worker rates.

    A static fleet at c = 1 is one worker busy and one idle; past a worker's
    ``max_num_seqs`` its rate stays at its best (the surplus waits in the gateway).
    """
    ll_max, ht_max = max(ll), max(ht)

    def rate(rates: dict[int, float], top: int, n: int) -> float:
        return 0.0 if n <= 0 else rates[min(n, top)]

    rows = []
    for c in levels:
        splits = [(rate(ll, ll_max, n) + rate(ht, ht_max, c - n), n) for n in range(0, min(c, ll_max) + 1)]
        best, share = max(splits)
        first, second = c - c // 2, c // 2  # c = 1: one worker busy, one idle
        statics = {"ll+ll": rate(ll, ll_max, first) + rate(ll, ll_max, second),
                   "ht+ht": rate(ht, ht_max, first) + rate(ht, ht_max, second)}  # fmt: skip
        fleet = max(statics, key=statics.__getitem__)
        rows.append(CeilingRow(c, share, best, statics[fleet], fleet))
    return rows


def measure(levels: Sequence[int], seed: int, texts: Sequence[str] = TEXTS) -> list[CeilingRow]:
    """Both one-worker sweeps, each on its own virtual-time loop (as every setup is), and the rows."""
    ll_loads, ht_loads = needed_loads(levels, max_load(LL_PROFILE), max_load(HT_PROFILE))
    ll = run_virtual(one_worker_rates(LL_PROFILE, PoolName.LOW_LATENCY, ll_loads, seed, texts))
    ht = run_virtual(one_worker_rates(HT_PROFILE, PoolName.HIGH_THROUGHPUT, ht_loads, seed, texts))
    return ceiling_rows(levels, ll, ht)


def ceiling_table(rows: Sequence[CeilingRow], documents: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown: adaptive / best static as measured in this run, beside the ceiling."""
    measured = _measured_ratios(documents)
    levels = [row.concurrency for row in rows]
    header = "| | " + " | ".join(f"c{c}" for c in levels) + " |"
    lines = [
        "## The ceiling of 1 low-latency + 1 high-throughput",
        "",
        "From closed-loop runs of one simulated worker of each profile at every load (same texts",
        "and seed): the best split of `c` requests between the two workers against the better",
        "static two-worker fleet (`c / 2` on each), beside `adaptive` against the best static",
        "fleet as this run measured them. A target above the ceiling row cannot be met by any",
        "policy on this fleet.",
        "",
        header,
        "|---|" + "---:|" * len(levels),
        "| `adaptive` / best static (this run) | " + " | ".join(_pct(measured.get(c)) for c in levels) + " |",
        "| best split / best static (one-worker runs) | " + " | ".join(_pct(r.ratio) for r in rows) + " |",
        "| best split: LL + HT requests | " + " | ".join(f"{r.ll_share} + {r.concurrency - r.ll_share}" for r in rows) + " |",
        "| best split audio-s/s | " + " | ".join(f"{r.best_split:.1f}" for r in rows) + " |",
        "| best static audio-s/s (fleet) | " + " | ".join(f"{r.best_static:.1f} ({r.static_fleet})" for r in rows) + " |",
        "",
    ]
    return lines


def as_csv(rows: Sequence[CeilingRow]) -> str:
    """The rows as CSV (beside the report's per-run JSON, which other tools read as results)."""
    lines = ["concurrency,ll_requests,ht_requests,best_split_audio_s_per_s,best_static_audio_s_per_s,best_static_fleet,ratio"]
    lines += [f"{r.concurrency},{r.ll_share},{r.concurrency - r.ll_share},{r.best_split:.3f},{r.best_static:.3f},"
              f"{r.static_fleet},{r.ratio:.4f}" for r in rows]  # fmt: skip
    return "\n".join(lines) + "\n"


def _measured_ratios(documents: Sequence[dict[str, Any]]) -> dict[int, float]:
    sweeps = {d["label"]: {p["concurrency"]: p["audio_s_per_s"] for p in d["phases"]}
              for d in documents if d["mode"] == "sweep"}  # fmt: skip
    adaptive, ht, ll = sweeps.get("adaptive", {}), sweeps.get("ht+ht", {}), sweeps.get("ll+ll", {})
    return {c: rate / max(ht[c], ll[c]) for c, rate in adaptive.items() if c in ht and c in ll and max(ht[c], ll[c]) > 0}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"
