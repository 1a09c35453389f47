"""``higgs-gateway tune``: measure both pools and recommend the routing thresholds.

Each pool's TTFP and RTF are measured against per-worker concurrency, either direct to
one worker of each pool (``--ll-url``/``--ht-url``: the cleanest numbers) or through a
gateway (``--url``), pinning the pool with the SLA header: ``latency`` stays on
low-latency while it has free slots and ``throughput`` stays on high-throughput. Through
a gateway the low-latency pool cannot be measured beyond its configured slots (latency
requests spill once their queue budget is spent); the report shows the pool split.

What it recommends, and ``--apply`` sends to the admin API (validated, persisted, followed
by other replicas, no restart):

- ``routing.measured``: both measured curves (decode RTF and TTFP by per-worker load). The
  default ``adaptive`` policy takes them as its priors, so its predictions start from this
  hardware and text mix instead of the deploy profile's estimate, and learn from there.
- ``routing.thresholds.balanced_threshold``: where the curves cross, for the ``rules``
  policy. Its ``pools.low_latency.slots_per_worker`` is printed (a config change).

Where the curves cross is pure analysis: one metric (lower is better: RTF or TTFP) per
per-worker concurrency for each pool in, the crossing point and the thresholds it implies out. The low-latency profile
wins at small batches (CUDA graphs) and loses as batches grow (padding to captured sizes,
prefill steps without graphs), so its lead is a prefix of the concurrency axis.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gateway.bench.arguments import int_list
from gateway.bench.cli import add_client_arguments, run_options
from gateway.bench.report import to_markdown, units_note
from gateway.bench.scenarios import run_async, sweep, warm_up
from gateway.help_format import HelpFormatter
from gateway.types import PoolName, SlaClass

DEFAULT_LEVELS = "1,2,4,6,8,12,16"
METRICS = {"rtf": ("rtf", "mean"), "ttfp": ("ttfp_s", "median")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="higgs-gateway tune", description=__doc__,
                                     formatter_class=HelpFormatter)  # fmt: skip
    target = parser.add_argument_group("what to measure")
    target.add_argument("--url", help="a gateway: pools pinned with x-sla-class")
    target.add_argument("--ll-workers", type=int, default=None,
                        help="with --url: workers in the low-latency pool (default: the gateway's /ready)")
    target.add_argument("--ht-workers", type=int, default=None,
                        help="with --url: workers in the high-throughput pool (default: the gateway's /ready)")
    target.add_argument("--ll-url", help="one low-latency worker, direct")
    target.add_argument("--ht-url", help="one high-throughput worker, direct")
    parser.add_argument("--levels", type=int_list, default=int_list(DEFAULT_LEVELS), help="per-worker concurrency")
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per level and worker (default max(24, 4 x level): mostly steady state)")
    parser.add_argument("--warmup", type=int, default=0, help="unmeasured requests before each level")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="skip the mixed-length round at the top level that warms lazy graphs first")
    parser.add_argument("--metric", choices=sorted(METRICS), default="rtf",
                        help="what 'beats' means: mean RTF or median TTFP")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("bench-out/tune"))
    parser.add_argument("--apply", action="store_true", help="PATCH the measured curves and thresholds through the admin API")
    parser.add_argument("--admin-url", help="gateway base URL for --apply (default: --url)")
    parser.add_argument("--admin-token", help="bearer token for --apply (or HIGGS_GATEWAY_ADMIN_TOKEN)")
    add_client_arguments(parser)
    return parser


def routable_workers(url: str) -> dict[str, int]:
    """Routable workers per pool, from the gateway's unauthenticated ``/ready`` (200 or 503)."""
    try:
        body = httpx.get(url.rstrip("/") + "/ready", timeout=5.0).json()
        return {str(k): int(v) for k, v in body.get("routable_workers", {}).items()}
    except (httpx.HTTPError, ValueError, AttributeError):
        return {}


def _targets(args: argparse.Namespace) -> dict[PoolName, tuple[str, SlaClass | None, int]]:
    """pool -> (url, header to pin it, workers the load is spread over)."""
    if args.ll_url and args.ht_url:
        return {PoolName.LOW_LATENCY: (args.ll_url, None, 1), PoolName.HIGH_THROUGHPUT: (args.ht_url, None, 1)}
    if args.url:
        if args.ll_workers is None or args.ht_workers is None:
            counts = routable_workers(args.url)
            args.ll_workers = args.ll_workers or counts.get(PoolName.LOW_LATENCY.value) or 1
            args.ht_workers = args.ht_workers or counts.get(PoolName.HIGH_THROUGHPUT.value) or 1
        return {
            PoolName.LOW_LATENCY: (args.url, SlaClass.LATENCY, args.ll_workers),
            PoolName.HIGH_THROUGHPUT: (args.url, SlaClass.THROUGHPUT, args.ht_workers),
        }
    raise SystemExit("give --url (a gateway) or both --ll-url and --ht-url (one worker of each pool)")


def measure(args: argparse.Namespace) -> dict[PoolName, dict[str, Any]]:
    """A sweep per pool, with phases relabelled to per-worker concurrency."""
    documents = {}
    for pool, (url, sla, workers) in _targets(args).items():
        options = run_options(args, url, pool.value)
        levels = [level * workers for level in args.levels]
        if not args.no_warm_up:
            run_async(warm_up(options, max(levels)))
        requests = args.requests and args.requests * workers
        document = run_async(sweep(options, levels, requests, args.warmup, sla, rounds=4, minimum=24 * workers))
        for phase, per_worker in zip(document["phases"], args.levels, strict=True):
            phase["total_concurrency"] = phase["concurrency"]
            phase["concurrency"] = per_worker
        document["params"]["workers"] = workers
        documents[pool] = document
    return documents


def curve(document: dict[str, Any], metric: str) -> dict[int, float]:
    key, stat = METRICS[metric]
    return {p["concurrency"]: p[key][stat] for p in document["phases"] if p["ok"] and p[key][stat] is not None}


def recommend(documents: dict[PoolName, dict[str, Any]], metric: str, ll_workers: int) -> dict[str, Any]:
    found: Crossover = find_crossover(curve(documents[PoolName.LOW_LATENCY], metric),
                                      curve(documents[PoolName.HIGH_THROUGHPUT], metric))  # fmt: skip
    slots = found.slots_per_worker
    return {
        "metric": metric,
        "last_win": found.last_win,
        "first_loss": found.first_loss,
        "crossing": found.crossing,
        "slots_per_worker": slots,
        "balanced_threshold": balanced_threshold(slots, ll_workers),
        "low_latency_workers": ll_workers,
    }


def measured_curves(documents: dict[PoolName, dict[str, Any]]) -> dict[str, dict[str, dict[int, float]]]:
    """``routing.measured`` from the sweeps: decode RTF (end-to-end RTF less TTFP's share) and median TTFP."""
    curves: dict[str, dict[str, dict[int, float]]] = {}
    for pool, document in documents.items():
        rtf: dict[int, float] = {}
        ttfp: dict[int, float] = {}
        for phase in document["phases"]:
            mean_rtf, mean_ttfp, median_ttfp = phase["rtf"]["mean"], phase["ttfp_s"]["mean"], phase["ttfp_s"]["median"]
            if not phase["ok"] or mean_rtf is None or mean_ttfp is None or median_ttfp is None:
                continue
            clip_s = phase["audio_s"] / phase["ok"]
            rtf[phase["concurrency"]] = round(max(mean_rtf - mean_ttfp / clip_s, mean_rtf * 0.5), 5)
            ttfp[phase["concurrency"]] = round(median_ttfp, 5)
        if rtf and ttfp:
            curves[pool.value] = {"rtf": rtf, "ttfp_s": ttfp}
    return curves


def explain(rec: dict[str, Any]) -> str:
    if rec["last_win"] is None:
        return (f"low-latency never beat high-throughput on {rec['metric']} (already not at {rec['first_loss']} "
                "per worker): keep its slots at 1 and question the pool's size.")  # fmt: skip
    if rec["first_loss"] is None:
        return (f"low-latency beat high-throughput on {rec['metric']} at every measured level up to "
                f"{rec['last_win']} per worker; measure higher levels to find the crossing.")  # fmt: skip
    return (f"low-latency led on {rec['metric']} up to {rec['last_win']} per worker and not at "
            f"{rec['first_loss']}; the curves cross near {rec['crossing']:.1f}.")  # fmt: skip


def comparison_table(documents: dict[PoolName, dict[str, Any]]) -> str:
    ll, ht = (documents[p] for p in (PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT))
    lines = [
        "| per worker | LL TTFP p50 (ms) | HT TTFP p50 (ms) | LL RTF mean | HT RTF mean | LL served by | HT served by |",
        "|---:|---:|---:|---:|---:|---|---|",
    ]
    ht_phases = {p["concurrency"]: p for p in ht["phases"]}
    for a in ll["phases"]:
        b = ht_phases.get(a["concurrency"])
        if b is None:
            continue

        def ms(phase: dict[str, Any]) -> str:
            value = phase["ttfp_s"]["median"]
            return "–" if value is None else f"{1000 * value:.0f}"

        def rtf(phase: dict[str, Any]) -> str:
            value = phase["rtf"]["mean"]
            return "–" if value is None else f"{value:.3f}"

        def pools(phase: dict[str, Any]) -> str:
            return " ".join(f"{k}:{v}" for k, v in phase["pools"].items())

        lines.append(f"| {a['concurrency']} | {ms(a)} | {ms(b)} | {rtf(a)} | {rtf(b)} | {pools(a)} | {pools(b)} |")
    return "\n".join(lines) + "\n"


def apply(admin_url: str, token: str, rec: dict[str, Any], client: httpx.Client | None = None) -> tuple[int, str]:
    """PATCH everything recommended at run time; the gateway validates and persists it."""
    with client or httpx.Client() as http:
        response = http.patch(
            admin_url.rstrip("/") + "/admin/routing",
            json={"measured": rec["measured"], "thresholds": {"balanced_threshold": rec["balanced_threshold"]}},
            headers={"authorization": f"Bearer {token}"},
            timeout=10.0,
        )
    return response.status_code, response.text


def main(argv: list[str] | None = None) -> int:
    import os

    args = build_parser().parse_args(argv)
    documents = measure(args)  # resolves --ll-workers/--ht-workers when measuring a gateway
    ll_workers = documents[PoolName.LOW_LATENCY]["params"]["workers"]
    rec = recommend(documents, args.metric, ll_workers)
    rec["measured"] = measured_curves(documents)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"recommendation": rec, "measurements": {pool.value: doc for pool, doc in documents.items()}}
    (args.out / "tune.json").write_text(json.dumps(result, indent=2) + "\n")
    snippet = (f"routing:\n  measured: {json.dumps(rec['measured'])}\n"
               f"  thresholds:\n    balanced_threshold: {rec['balanced_threshold']}  # rules policy\n"
               f"pools:\n  low_latency:\n    slots_per_worker: {rec['slots_per_worker']}  # rules policy only\n")  # fmt: skip
    from gateway.bench.report import plot_sweeps

    plots = plot_sweeps(list(documents.values()), args.out)
    command = "higgs-gateway tune " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[2:]))
    text = "\n".join([
        "# Pool tuning", "", f"Reproduce: `{command}`", "", units_note(args.time_scale), "",
        "Concurrency is per worker. Mean RTF and median TTFP per pool:", "", comparison_table(documents),
        explain(rec), "", "Recommended config:", "", "```yaml", snippet + "```", "",
        *[f"![{p.stem}]({p.name})" for p in plots if p.stem != "throughput"], "",
        "## Every level", "", to_markdown(list(documents.values()), by_class=False),
    ])  # fmt: skip
    (args.out / "tune.md").write_text(text)
    print(text)
    if args.apply:
        admin_url = args.admin_url or args.url
        token = args.admin_token or os.environ.get("HIGGS_GATEWAY_ADMIN_TOKEN")
        if not admin_url or not token:
            print("--apply needs --admin-url (or --url) and --admin-token", file=sys.stderr)
            return 2
        status, body = apply(admin_url, token, rec)
        print(f"PATCH /admin/routing -> {status} {body[:500]}", file=sys.stderr)
        print("For the rules policy, slots_per_worker is a config change: set it and restart.", file=sys.stderr)
        return 0 if 200 <= status < 300 else 1
    return 0


# ---- where the curves cross -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Crossover:
    last_win: int | None  # largest measured level up to which low-latency led at every level
    first_loss: int | None  # first measured level where it did not
    crossing: float | None  # interpolated concurrency where the two curves meet (None: never met)

    @property
    def slots_per_worker(self) -> int:
        """Requests a low-latency worker should carry: the last concurrency it still wins at."""
        if self.crossing is not None:
            return max(1, math.floor(self.crossing + 1e-9))  # 6.9999... from float noise is 7
        return self.last_win or 1


def find_crossover(low_latency: Mapping[int, float], high_throughput: Mapping[int, float]) -> Crossover:
    """Compare the pools at the levels both measured; ties count as a loss for low-latency."""
    levels = sorted(set(low_latency) & set(high_throughput))
    if not levels:
        raise ValueError("the pools share no measured concurrency level")
    last_win: int | None = None
    for level in levels:
        if low_latency[level] < high_throughput[level]:
            last_win = level
            continue
        if last_win is None:
            return Crossover(None, level, None)
        before = low_latency[last_win] - high_throughput[last_win]  # < 0
        after = low_latency[level] - high_throughput[level]  # >= 0
        crossing = last_win + (level - last_win) * (-before) / (after - before)
        return Crossover(last_win, level, crossing)
    return Crossover(last_win, None, None)


def balanced_threshold(slots_per_worker: int, low_latency_workers: int) -> int:
    """Fleet-wide live concurrency at which `balanced` traffic should leave low-latency:
    the moment every low-latency worker carries its recommended share."""
    return slots_per_worker * max(1, low_latency_workers)
