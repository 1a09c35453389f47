"""``higgs-gateway simulate``: the benchmark's sweeps and traces on a simulated fleet, in seconds.

Without ``--fleet`` it runs the same setups as ``bench compare`` (two workers each) with
the same texts, seeds, warm-up and report format, so the two can be compared line by line.
With ``--fleet ll=3,ht=5`` it answers "what if this traffic ran on that fleet?".
``higgs-gateway simulate seeds`` runs the policy's regression sweep over many seeds (seeds.py).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.bench import report
from gateway.bench.arguments import int_list
from gateway.bench.cli import add_trace_arguments
from gateway.bench.compare import SETUPS, Setup, add_ramp_arguments, headline, ramp_trace, trace_file
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE
from gateway.bench.scenarios import DEFAULT_LEVELS
from gateway.bench.targets import new_run_id, targets_table
from gateway.config import AdmissionConfig, RoutingThresholds
from gateway.help_format import HelpFormatter
from gateway.simulator import ceiling
from gateway.simulator.loop import run_virtual
from gateway.simulator.runs import PROFILE_POOLS, plans_for, simulate

__all__ = ["PROFILE_POOLS", "build_parser", "main", "plans_for", "render", "run", "simulate"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="higgs-gateway simulate", description=__doc__,
                                     formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--setups", default="adaptive,ht+ht,ll+ll,rules",
                        help=f"comma-separated, from: {', '.join(s.name for s in SETUPS)}")  # fmt: skip
    parser.add_argument("--fleet", default=None, help="a custom fleet instead of --setups, e.g. ll=3,ht=5")
    parser.add_argument("--policy", default="adaptive", help="with --fleet: the routing policy")
    parser.add_argument("--replica-view", choices=("shared", "reports"), default="shared",
                        help="setups with several gateway replicas (adaptive-2r, adaptive-3r): shared = every "
                             "replica counts every lease (state.backend: redis); reports = each sees the others "
                             "only in the workers' load reports, as before the shared view")  # fmt: skip
    parser.add_argument("--thresholds", default=None, help="routing thresholds as JSON, e.g. '{\"reserve_for_latency\": 1}'")
    parser.add_argument("--admission", default=None, help="admission settings as JSON, e.g. '{\"promote_after_s\": 2}'")
    parser.add_argument("--ceiling", action="store_true",
                        help="also run one worker of each profile at every load and report the best split of "
                             "1 low-latency + 1 high-throughput against the best static fleet")  # fmt: skip
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)), help="sweep levels ('' = no sweep)")
    parser.add_argument("--requests", type=int, default=None, help="requests per level (default max(32, 4 x level))")
    add_trace_arguments(parser, allow_none=True)
    add_ramp_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write JSON results and README.md here")
    day = parser.add_argument_group("a day with autoscaling (--day; docs/planner.md)")
    day.add_argument("--day", action="store_true",
                     help="instead of sweeps and traces: one compressed day on the planner's fleet, the static "
                          "fleet for peak, and each profile autoscaled on saturation")  # fmt: skip
    day.add_argument("--day-length", type=float, default=3600.0, help="seconds of the compressed day")
    day.add_argument("--peak-rate", type=float, default=8.0, help="requests per second at the day's peak")
    day.add_argument("--provision-delay", type=float, default=60.0, help="seconds before a new worker serves")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["seeds"]:  # the policy's regression sweep over seeds (its own parser)
        from gateway.simulator import seeds

        return seeds.main(argv[1:])
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    from gateway.bench.cli import build_trace  # noqa: F811

    if args.day:
        return run_day_comparison(args)
    levels = int_list(args.levels) if args.levels else []
    setups = _setups(args)
    thresholds = RoutingThresholds.model_validate_json(args.thresholds) if args.thresholds else None
    admission = AdmissionConfig.model_validate_json(args.admission) if args.admission else None
    traces = [build_trace(args), ramp_trace(args)]
    traces = [(arrivals, params) for arrivals, params in traces if arrivals]
    documents: list[dict[str, Any]] = []
    run_id = new_run_id()  # one invocation is one run: its setups compare with each other
    for setup in setups:
        documents += run_virtual(simulate(setup, levels, args.requests, traces, args.seed, thresholds,
                                          run_id=run_id, admission=admission,
                                          replica_view=args.replica_view))  # fmt: skip
    lines = render(documents, setups, levels, _command())
    ceiling_rows = ceiling.measure(levels, args.seed) if args.ceiling and levels else []
    if ceiling_rows:
        lines += ceiling.ceiling_table(ceiling_rows, documents)
    if args.out:
        from gateway.bench.report import plot_sweeps, plot_timeline, plot_traces

        for document in documents:
            name = trace_file(document["label"], document["params"]["kind"]) if document["mode"] == "trace" else f"{document['label']}-sweep"
            report.write(document, args.out, name)
        args.out.mkdir(parents=True, exist_ok=True)
        if ceiling_rows:
            (args.out / "ceiling.csv").write_text(ceiling.as_csv(ceiling_rows))
        plots = plot_sweeps(documents, args.out) + plot_traces(documents, args.out, kind="bursty") + plot_timeline(documents, args.out)
        lines += [f"![{p.stem}]({p.name})" for p in plots]
        (args.out / "README.md").write_text("\n".join(lines))
        print(f"wrote {args.out / 'README.md'}", file=sys.stderr)
    else:
        print("\n".join(lines))
    return 0


def run_day_comparison(args: argparse.Namespace) -> int:
    import json

    from gateway.simulator.day import DayOptions, compare_day, plot_day, render_day

    options = DayOptions(
        duration_s=args.day_length, peak_rate=args.peak_rate, seed=args.seed, provision_delay_s=args.provision_delay
    )
    results, arrivals = compare_day(options)
    lines = render_day(results, options, _command())
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "day.json").write_text(json.dumps(results, indent=1))
        plot = plot_day(results, arrivals, options, args.out)
        lines += ["", f"![{plot.stem}]({plot.name})"]
        (args.out / "README.md").write_text("\n".join(lines) + "\n")
        print(f"wrote {args.out / 'README.md'}", file=sys.stderr)
    else:
        print("\n".join(lines))
    return 0


def _setups(args: argparse.Namespace) -> list[Setup]:
    if args.fleet:
        counts = dict(part.split("=", 1) for part in args.fleet.split(",") if part)
        unknown = set(counts) - {"ll", "ht"}
        if unknown:
            raise SystemExit(f"--fleet takes ll=N,ht=M; unknown: {', '.join(sorted(unknown))}")
        profiles = (LL_PROFILE,) * int(counts.get("ll", 0)) + (HT_PROFILE,) * int(counts.get("ht", 0))
        if not profiles:
            raise SystemExit("--fleet names no worker")
        name = f"{counts.get('ll', 0)}ll+{counts.get('ht', 0)}ht"
        return [Setup(name, args.policy, profiles, summary=f"{args.fleet}, {args.policy}")]  # type: ignore[arg-type]
    names = [name.strip() for name in args.setups.split(",") if name.strip()]
    known = {s.name: s for s in SETUPS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown setups: {', '.join(unknown)}")
    return [known[name] for name in names]


def render(documents: list[dict[str, Any]], setups: Sequence[Setup], levels: Sequence[int], command: str) -> list[str]:
    sweeps = [d for d in documents if d["mode"] == "sweep"]
    traces = [d for d in documents if d["mode"] == "trace"]
    lines = [
        "# Simulated fleet (virtual time)",
        "",
        f"Reproduce: `{command}`",
        "",
        "The emulator's engines on a virtual clock behind the gateway's real admission, policy and",
        "performance model; no HTTP, so the gateway's own ~2 ms per request is not included.",
        "",
        "| config | workers and policy |",
        "|---|---|",
        *[f"| {s.name} | {s.summary} (`{s.policy}`) |" for s in setups],
        "",
    ]
    if levels:
        lines += ["## Summary", "", *headline(documents, list(levels)), ""]
    lines += targets_table(documents)
    if sweeps:
        lines += ["## Closed-loop sweep", "", report.to_markdown(sweeps, by_class=False), ""]
    for kind in dict.fromkeys(d["params"]["kind"] for d in traces):
        of_kind = [d for d in traces if d["params"]["kind"] == kind]
        lines += [f"## Trace: {kind} (open loop)", "", report.to_markdown(of_kind, by_class=True), ""]
    return lines


def _command() -> str:
    return "higgs-gateway " + " ".join(shlex.quote(a) for a in sys.argv[1:])
