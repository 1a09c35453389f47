"""The routing policy's regression suite: the simulator over many seeds and text mixes.

One seed is one traffic sample: a policy tuned on it can sit at the ceiling there and
several points under it elsewhere. This module runs, for every seed and text mix, the
closed-loop sweep of ``adaptive`` (1 LL + 1 HT), of both static fleets (ht+ht, ll+ll) and
the ceiling of the mixed fleet (``ceiling.measure``), and the bursty, poisson and ramp
traces on ``adaptive`` and ht+ht, and reduces each to the figures the routing targets are
about (``SeedFigures``). ``summary`` turns them into one table over seeds (worst,
median, best) with the target beside each figure.

*adaptive / ceiling* at ``c`` is ``adaptive``'s share of the better static fleet measured
in the same sweep, over the best split's share of it from the one-worker runs: 100% is
the best split of the two workers. Every sweep here runs as long as the ceiling's own
runs (``ceiling.STEADY_ROUNDS`` rounds of ``c`` requests per level, at least
``ceiling.STEADY_MINIMUM``), so both sides of the ratio are steady-state rates. At the
compare benchmark's 4 rounds, the closing wave of a mixed fleet (long clips finishing on
the slower profile while the other idles) is a tenth of the level and does not cancel
against the static fleets' (whose two workers drain alike): the share read there is that
end effect and the small sample, several points either way per seed, not the policy.

The static fleets and the ceiling do not depend on the policy: ``cache`` keeps them per
seed and mix in a directory, so trying a policy change costs only ``adaptive``'s runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.bench.compare import SETUPS, Setup
from gateway.bench.workload import TEXTS
from gateway.bench.workload import Arrival, bursty, poisson, ramp
from gateway.bench.workload import RAMP_MIX
from gateway.config import RoutingThresholds
from gateway.help_format import HelpFormatter
from gateway.simulator import ceiling
from gateway.simulator.loop import run_virtual
from gateway.simulator.runs import simulate
from gateway.types.curve import audio_seconds_for

LEVELS = (1, 2, 4, 8, 16, 32, 64)
SHARE_LEVELS = (4, 8, 16, 32, 64)  # where the targets hold adaptive to the ceiling
# Short: assistant replies and a few sentences (1-10 s of audio); long: a few sentences
# up to narration (7-45 s). The benchmark's own set is both.
MIXES: dict[str, tuple[str, ...]] = {
    "short": tuple(t for t in TEXTS if audio_seconds_for(len(t)) < 12),
    "long": tuple(t for t in TEXTS if audio_seconds_for(len(t)) >= 6),
}
TRACE_KINDS = ("bursty", "poisson", "ramp")
# Requests per sweep level: as many as the ceiling's runs, so the ratio compares steady states.
SWEEP_ROUNDS, SWEEP_MINIMUM = ceiling.STEADY_ROUNDS, ceiling.STEADY_MINIMUM
_SETUPS = {s.name: s for s in SETUPS}
Figures = dict[str, float]


@dataclass(frozen=True, slots=True)
class Target:
    """A figure's bound: ``higher`` figures are better when True (the worst seed is the min)."""

    bound: float
    higher: bool

    def met(self, value: float) -> bool:
        return value >= self.bound if self.higher else value <= self.bound

    def worst(self, values: Sequence[float]) -> float:
        return min(values) if self.higher else max(values)


# The targets: medians and worst seeds for the shares, every seed for the rest.
MEDIAN_SHARE, WORST_SHARE = 0.97, 0.94
# The committed sweep (docs/benchmarks/seed-sweep), as scripts/bench_compare.sh runs it.
CANONICAL_COMMAND = (
    "higgs-gateway simulate seeds --seeds 0-9 --mixes short,long --held-out 2-9 --out docs/benchmarks/seed-sweep"
)
# A policy change that loses this much of the median share at any level is a regression.
REGRESSION_POINTS = 0.02
TARGETS: dict[str, Target] = {
    "c1 RTF / ll+ll": Target(1.02, higher=False),
    "c2 RTF / ll+ll": Target(1.02, higher=False),
    "c64 RTF p99": Target(1.0, higher=False),
    "bursty latency TTFP p99 / ht+ht": Target(1.0, higher=False),
    "bursty latency RTF mean / ht+ht": Target(0.85, higher=False),
    "bursty audio-s/s / ht+ht": Target(0.95, higher=True),
}


def trace_for(kind: str, seed: int) -> tuple[list[Arrival], dict[str, Any]]:
    """The compare benchmark's traces at its defaults (``bench trace`` / ``bench compare``)."""
    if kind == "bursty":
        return bursty(120.0, seed, 1.0, 8.0, 15.0, 25.0), {"kind": "bursty"}
    if kind == "poisson":
        return poisson(2.0, 120.0, seed), {"kind": "poisson"}
    if kind == "ramp":
        return ramp(240.0, seed, 0.1, 7.0), {"kind": "ramp", "mix": {c.value: w for c, w in RAMP_MIX}}
    raise ValueError(f"unknown trace kind {kind!r}")


def run_setup(setup: Setup, seed: int, texts: Sequence[str], traces: bool,
              thresholds: RoutingThresholds | None = None) -> list[dict[str, Any]]:  # fmt: skip
    chosen = [trace_for(kind, seed) for kind in TRACE_KINDS] if traces else []
    return run_virtual(simulate(setup, LEVELS, None, chosen, seed, thresholds, rounds=SWEEP_ROUNDS,
                                minimum=SWEEP_MINIMUM, texts=texts))


def static_figures(seed: int, mix: str) -> dict[str, Any]:
    """What does not depend on the policy: both static fleets and the ceiling."""
    texts = MIXES[mix]
    documents = run_setup(_SETUPS["ht+ht"], seed, texts, traces=True) + run_setup(_SETUPS["ll+ll"], seed, texts, traces=False)
    rows = ceiling.measure(LEVELS, seed, texts)
    return {"documents": [_slim(d) for d in documents], "ceiling": {r.concurrency: r.ratio for r in rows},
            "split": {r.concurrency: r.ll_share for r in rows}}  # fmt: skip


def cached(cache: Path | None, seed: int, mix: str) -> dict[str, Any]:
    if cache is None:
        return static_figures(seed, mix)
    path = cache / f"static-{mix}-{seed}-r{SWEEP_ROUNDS}-m{SWEEP_MINIMUM}.json"  # another sweep length: another file
    if path.exists():
        found: dict[str, Any] = json.loads(path.read_text())
        return {**found, "ceiling": {int(c): v for c, v in found["ceiling"].items()},
                "split": {int(c): v for c, v in found["split"].items()}}  # fmt: skip
    result = static_figures(seed, mix)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def seed_figures(seed: int, mix: str, cache: Path | None = None, thresholds: RoutingThresholds | None = None,
                 traces: bool = True) -> Figures:  # fmt: skip
    """``adaptive`` on one seed and mix, against the static fleets and the ceiling."""
    static = cached(cache, seed, mix)
    adaptive = [_slim(d) for d in run_setup(_SETUPS["adaptive"], seed, MIXES[mix], traces, thresholds)]
    return figures(adaptive, static["documents"], static["ceiling"])


def figures(adaptive: Sequence[dict[str, Any]], static: Sequence[dict[str, Any]], ceilings: Mapping[int, float]) -> Figures:
    sweeps = {d["label"]: {p["concurrency"]: p for p in d["phases"]} for d in (*adaptive, *static) if d["mode"] == "sweep"}
    ours, ht, ll = sweeps["adaptive"], sweeps["ht+ht"], sweeps["ll+ll"]
    out: Figures = {}
    for c in SHARE_LEVELS:
        best_static = max(ht[c]["audio_s_per_s"], ll[c]["audio_s_per_s"])
        out[f"c{c} adaptive / ceiling"] = ours[c]["audio_s_per_s"] / best_static / ceilings[c]
    for c in (1, 2):
        out[f"c{c} RTF / ll+ll"] = ours[c]["rtf"]["mean"] / ll[c]["rtf"]["mean"]
    out["c64 RTF p99"] = ours[64]["rtf"]["p99"]
    traces = {(d["label"], d["params"]["kind"]): d["phases"][0] for d in (*adaptive, *static) if d["mode"] == "trace"}
    for kind in TRACE_KINDS:
        mine, theirs = traces.get(("adaptive", kind)), traces.get(("ht+ht", kind))
        if mine is None or theirs is None:
            continue
        out[f"{kind} audio-s/s / ht+ht"] = mine["audio_s_per_s"] / theirs["audio_s_per_s"]
        if kind == "bursty":
            # The bursts hold the fleet at capacity, where 1 LL + 1 HT does at most the c64
            # ceiling's share of ht+ht: this tells the policy's loss from the fleet's.
            out["bursty audio-s/s / c64 ceiling"] = out[f"{kind} audio-s/s / ht+ht"] / ceilings[64]
        for sla in ("latency", "balanced", "throughput"):
            a, b = mine.get("by_class", {}).get(sla), theirs.get("by_class", {}).get(sla)
            if a and b and a["ok"] and b["ok"]:
                out[f"{kind} {sla} TTFP p99 / ht+ht"] = a["ttfp_s"]["p99"] / b["ttfp_s"]["p99"]
                out[f"{kind} {sla} RTF mean / ht+ht"] = a["rtf"]["mean"] / b["rtf"]["mean"]
    return out


def _slim(document: dict[str, Any]) -> dict[str, Any]:
    """Only what ``figures`` reads (a cached static fleet stays small)."""
    keep = ("concurrency", "audio_s_per_s", "rtf", "ttfp_s", "by_class", "ok")
    phases = [{k: p[k] for k in keep if k in p} for p in document["phases"]]
    return {"label": document["label"], "mode": document["mode"], "params": {"kind": document["params"].get("kind")},
            "phases": phases}  # fmt: skip


def target_for(name: str) -> str:
    if name.endswith("adaptive / ceiling"):
        return f"median ≥ {MEDIAN_SHARE:.0%}, worst ≥ {WORST_SHARE:.0%}"
    target = TARGETS.get(name)
    if target is None:
        return ""
    return f"{'≥' if target.higher else '≤'} {target.bound:g} every seed"


def verdict(name: str, values: Sequence[float]) -> str:
    if name.endswith("adaptive / ceiling"):
        return "met" if statistics.median(values) >= MEDIAN_SHARE and min(values) >= WORST_SHARE else "missed"
    target = TARGETS.get(name)
    if target is None:
        return ""
    return "met" if target.met(target.worst(values)) else "missed"


def summary(results: Mapping[tuple[str, int], Figures], seeds: Iterable[int] | None = None) -> list[str]:
    """Markdown: every figure over the chosen seeds (all by default) and both mixes."""
    chosen = None if seeds is None else set(seeds)
    rows = [f for (mix, seed), f in results.items() if chosen is None or seed in chosen]
    names = list(dict.fromkeys(name for figures_ in rows for name in figures_))
    lines = ["| figure | worst | median | best | target | |", "|---|---:|---:|---:|---|---|"]
    for name in names:
        values = [f[name] for f in rows if name in f]
        target = TARGETS.get(name)
        higher = target.higher if target else not _lower_is_better(name)
        worst, best = (min(values), max(values)) if higher else (max(values), min(values))
        fmt = _fmt(name)
        lines.append(f"| {name} | {fmt(worst)} | {fmt(statistics.median(values))} | {fmt(best)} | "
                     f"{target_for(name)} | {verdict(name, values)} |")  # fmt: skip
    return lines


def per_seed(results: Mapping[tuple[str, int], Figures]) -> list[str]:
    """Markdown: adaptive / ceiling per seed and mix (where a regression shows first)."""
    header = (
        "| mix | seed | " + " | ".join(f"c{c}" for c in SHARE_LEVELS) + " | c64 RTF p99 | bursty `latency` TTFP p99 / ht+ht |"
    )
    lines = [header, "|---|---:|" + "---:|" * (len(SHARE_LEVELS) + 2)]
    for (mix, seed), f in sorted(results.items()):
        shares = " | ".join(f"{f[f'c{c} adaptive / ceiling']:.1%}" for c in SHARE_LEVELS)
        burst = f.get("bursty latency TTFP p99 / ht+ht")
        lines.append(f"| {mix} | {seed} | {shares} | {f['c64 RTF p99']:.3f} | {'–' if burst is None else f'{burst:.2f}'} |")
    return lines


def median_shares(results: Mapping[tuple[str, int], Figures]) -> dict[int, float]:
    """The median over seeds and mixes of adaptive / ceiling at each level (the regression test's figure)."""
    return {c: statistics.median(f[f"c{c} adaptive / ceiling"] for f in results.values()) for c in SHARE_LEVELS}


def _lower_is_better(name: str) -> bool:
    return "TTFP" in name or "RTF" in name


def _fmt(name: str) -> Callable[[float], str]:
    if name == "c64 RTF p99":
        return lambda v: f"{v:.3f}"
    return lambda v: f"{v:.1%}"


def seed_list(spec: str) -> list[int]:
    """``0-9`` or ``0,3,5`` or ``10-14,20``."""
    seeds: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            first, last = part.split("-", 1)
            seeds += range(int(first), int(last) + 1)
        elif part.strip():
            seeds.append(int(part))
    return seeds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="higgs-gateway simulate seeds", description=__doc__,
                                     formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--seeds", default="0-9", help="seeds, e.g. 0-9 or 0,3,5")
    parser.add_argument("--held-out", default="", help="seeds reported on their own as well (not tuned on)")
    parser.add_argument("--mixes", default=",".join(MIXES), help=f"text mixes, from: {', '.join(MIXES)}")
    parser.add_argument("--no-traces", action="store_true", help="sweeps only (the quick check)")
    parser.add_argument("--thresholds", default=None, help="routing thresholds as JSON for adaptive")
    parser.add_argument("--cache", type=Path, default=None,
                        help="keep the static fleets and ceilings here (they do not depend on the policy)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="write README.md and results.json here")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="write --out's report from these directories' results.json (seeds run apart)")  # fmt: skip
    parser.add_argument("--check", type=Path, default=None,
                        help="compare --out's results.json with this committed one: exit 1 if a level's median "
                             "adaptive / ceiling fell by 2 points or more")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.check is not None:
        return check(args.check, args.out)
    if args.merge:
        return merge(args.merge, args.out, seed_list(args.held_out))
    thresholds = RoutingThresholds.model_validate_json(args.thresholds) if args.thresholds else None
    command = " ".join(["higgs-gateway simulate seeds", *(sys.argv[3:] if argv is None else argv)])
    results: dict[tuple[str, int], Figures] = {}
    mixes = [m.strip() for m in args.mixes.split(",") if m.strip()]
    for seed in seed_list(args.seeds):  # one at a time: the machine's other work keeps its cores
        for mix in mixes:
            results[(mix, seed)] = seed_figures(seed, mix, args.cache, thresholds, traces=not args.no_traces)
            print(f"seed {seed} {mix}: " + ", ".join(f"c{c} {results[(mix, seed)][f'c{c} adaptive / ceiling']:.1%}"
                                                    for c in SHARE_LEVELS), file=sys.stderr)  # fmt: skip
            if args.out:  # after every seed: a long sweep cut short keeps what it measured
                write(args.out, results, seed_list(args.held_out), command)
    if not args.out:
        print("\n".join(render(results, seed_list(args.held_out), command)))
    return 0


def write(out: Path, results: Mapping[tuple[str, int], Figures], held_out: Sequence[int], command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text("\n".join(render(results, held_out, command)) + "\n")
    document = [{"mix": mix, "seed": seed, "figures": f} for (mix, seed), f in sorted(results.items())]
    (out / "results.json").write_text(json.dumps(document, indent=1) + "\n")


def load(path: Path) -> dict[tuple[str, int], Figures]:
    return {(entry["mix"], entry["seed"]): entry["figures"] for entry in json.loads(path.read_text())}


def regressions(baseline: Mapping[tuple[str, int], Figures], current: Mapping[tuple[str, int], Figures],
                points: float = REGRESSION_POINTS) -> list[str]:  # fmt: skip
    """Levels where the median adaptive / ceiling over the baseline's seeds fell by ``points`` or more."""
    common = {key: baseline[key] for key in current if key in baseline}
    if not common:
        raise ValueError("no seed and mix in common with the baseline")
    before, after = median_shares(common), median_shares({key: current[key] for key in common})
    return [f"c{c}: median adaptive / ceiling {before[c]:.1%} -> {after[c]:.1%}"
            for c in SHARE_LEVELS if after[c] <= before[c] - points]  # fmt: skip


def merge(sources: Sequence[Path], out: Path | None, held_out: Sequence[int]) -> int:
    """One report from sweeps run as several invocations (seeds split between processes):
    the figures do not depend on which process ran a seed."""
    if out is None:
        raise SystemExit("--merge needs --out")
    results: dict[tuple[str, int], Figures] = {}
    for source in sources:
        results.update(load(source / "results.json"))
    write(out, results, held_out, CANONICAL_COMMAND)
    return 0


def check(baseline_path: Path, current_dir: Path | None) -> int:
    """Exit 1 when a new sweep (``--out``'s results.json) lost ``REGRESSION_POINTS`` on a median."""
    if current_dir is None:
        raise SystemExit("--check needs --out: the directory of the new sweep's results.json")
    lost = regressions(load(baseline_path), load(current_dir / "results.json"))
    print("\n".join(lost) if lost else "no level lost 2 points on the median", file=sys.stderr)
    return 1 if lost else 0


def render(results: Mapping[tuple[str, int], Figures], held_out: Sequence[int], command: str) -> list[str]:
    seeds = sorted({seed for _, seed in results})
    mixes = list(dict.fromkeys(mix for mix, _ in sorted(results)))
    by_mix = {m: sorted(seed for mix, seed in results if mix == m) for m in mixes}
    lines = [
        "# `adaptive` over seeds and text mixes (simulator)",
        "",
        f"Reproduce: `{command}`",
        "",
        "Here: "
        + "; ".join(f"`{m}` ({len(MIXES[m])} texts) on seeds {', '.join(map(str, by_mix[m]))}" for m in mixes)
        + ". Every setup of a seed and mix in one run of the simulator (virtual time: the",
        "figures do not depend on the machine's load, only on the code).",
        "*adaptive / ceiling*: adaptive's share of the better static fleet in the same sweep over",
        "the best LL + HT split's share of it from one-worker runs (`simulate --ceiling`).",
        f"Every sweep level runs {SWEEP_ROUNDS} rounds of its concurrency and at least {SWEEP_MINIMUM} requests, as",
        "the ceiling's one-worker runs do, so the share compares steady-state rates (docs/routing.md).",
        f"*c2 RTF / ll+ll* is about {ceiling.c2_rtf_bound():.0%} on 1 LL + 1 HT whatever the policy (the profiles' prior",
        "curves): both requests on the low-latency worker run at its load-2 RTF, or one runs on",
        f"high-throughput, where ll+ll runs each alone. Its {TARGETS['c2 RTF / ll+ll'].bound:g} target cannot be met on this fleet.",
        "*bursty audio-s/s / c64 ceiling*: the bursts hold the fleet at capacity, where the best",
        "split of 1 LL + 1 HT does only the c64 ceiling's share of ht+ht: where that share is",
        "under 0.95 (long clips), the 0.95 target on bursty audio-s/s is past the fleet's reach.",
        "",
        "## Over every seed and mix",
        "",
        *summary(results),
        "",
    ]
    held = [s for s in held_out if s in seeds]
    if held:
        lines += [f"## Held-out seeds only ({', '.join(map(str, held))})", "", *summary(results, held), ""]
    lines += ["## Per seed", "", *per_seed(results), ""]
    return lines
