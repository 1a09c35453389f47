"""``higgs-gateway bench``: load tests and benchmarks, against any OpenAI-compatible speech endpoint or on emulated fleets.

    higgs-gateway bench sweep URL [--levels 1,2,4,8,16,32,64] [--requests N] ...
    higgs-gateway bench trace URL --kind poisson|bursty [--duration S] [--rate R] ...
    higgs-gateway bench plot RESULT.json... --out DIR
    higgs-gateway bench compare --out docs/benchmarks/comparison
    higgs-gateway bench overhead --out docs/benchmarks
    higgs-gateway bench first-audio --out docs/benchmarks/first-audio
    higgs-gateway bench sessions --out docs/benchmarks/sessions
    higgs-gateway bench integrations --out docs/benchmarks/integrations
    higgs-gateway bench profile-changes --out docs/benchmarks/profile-changes
    higgs-gateway bench upload-stall --out docs/benchmarks/upload-stall
    higgs-gateway bench soak --out docs/benchmarks/soak.md
    higgs-gateway bench decision
    higgs-gateway bench encoder-cost
    higgs-gateway bench agreement docs/benchmarks/comparison docs/benchmarks/simulator

URL is a base URL (``http://127.0.0.1:8000``) or the full ``/v1/audio/speech`` endpoint:
the gateway, a single worker, or anything else that speaks the API.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from gateway.bench import report, workload
from gateway.bench.arguments import int_list
from gateway.bench.client import ClientOptions
from gateway.bench.scenarios import DEFAULT_LEVELS, RunOptions, run_async, sweep, trace
from gateway.config import DEFAULT_MODEL
from gateway.help_format import HelpFormatter
from gateway.types import SlaClass


def add_client_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that sends speech requests."""
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model field ('' to omit it)")
    parser.add_argument("--voice", default="default")
    parser.add_argument("--api-key", default=None, help="sent as Authorization: Bearer")
    parser.add_argument("--client", choices=("aiohttp", "httpx"), default="aiohttp", help="HTTP client of the load generator")
    parser.add_argument("--timeout", type=float, default=600.0, help="per-request timeout, seconds (wall clock)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="the emulator's --time-scale: results are converted to modelled units")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="text order and trace seed")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")


def run_options(args: argparse.Namespace, url: str, label: str) -> RunOptions:
    if args.time_scale <= 0:
        raise SystemExit("--time-scale must be positive")
    client = ClientOptions(url=url, model=args.model or None, voice=args.voice, api_key=args.api_key, timeout_s=args.timeout)
    return RunOptions(client, label, args.client, args.time_scale, args.seed, not args.no_progress)


def _add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label", default=None, help="configuration name in reports (default: from the URL)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="output directory")
    parser.add_argument("--plot", action="store_true", help="also write PNG plots")


def _emit(document: dict[str, Any], args: argparse.Namespace) -> None:
    stem = f"{document['label']}-{document['mode']}"
    paths = report.write(document, args.out, stem)
    if args.plot:
        from gateway.bench.report import plot_sweeps, plot_traces

        paths += plot_sweeps([document], args.out, f"{stem}-") + plot_traces([document], args.out, f"{stem}-")
    print(report.to_markdown([document]))
    print("wrote " + ", ".join(str(path) for path in paths), file=sys.stderr)


def _label(args: argparse.Namespace) -> str:
    return args.label or args.url.split("//", 1)[-1].split("/", 1)[0].replace(":", "_")


def cmd_sweep(args: argparse.Namespace) -> int:
    options = run_options(args, args.url, _label(args))
    sla = SlaClass(args.sla_class) if args.sla_class else None
    document = run_async(sweep(options, args.levels, args.requests, args.warmup, sla))
    _emit(document, args)
    return 0


def build_trace(args: argparse.Namespace) -> tuple[list[workload.Arrival], dict[str, Any]]:
    """The trace the arguments describe, in modelled seconds, and its parameters."""
    if args.kind == "poisson":
        sla = SlaClass(args.sla_class) if args.sla_class else None
        arrivals = workload.poisson(args.rate, args.duration, args.seed, sla)
        params = {"kind": "poisson", "rate": args.rate, "duration_s": args.duration, "sla_class": args.sla_class}
    elif args.kind == "ramp":
        arrivals = workload.ramp(args.duration, args.seed, args.ramp_start, args.ramp_peak)
        params = {"kind": "ramp", "duration_s": args.duration, "start_rate": args.ramp_start,
                  "peak_rate": args.ramp_peak, "mix": {c.value: w for c, w in workload.RAMP_MIX}}  # fmt: skip
    elif args.kind == "bursty":
        arrivals = workload.bursty(args.duration, args.seed, args.latency_rate, args.burst_rate, args.on, args.off)
        params = {
            "kind": "bursty", "duration_s": args.duration, "latency_rate": args.latency_rate,
            "burst_rate": args.burst_rate, "on_s": args.on, "off_s": args.off,
        }  # fmt: skip
    else:
        arrivals, params = [], {"kind": "none"}
    return arrivals, params


def add_trace_arguments(parser: argparse.ArgumentParser, allow_none: bool = False) -> None:
    kinds = ("poisson", "bursty", "ramp", "none") if allow_none else ("poisson", "bursty", "ramp")
    parser.add_argument("--kind", choices=kinds, default="bursty", help="trace shape")
    parser.add_argument("--duration", type=float, default=120.0, help="trace length, modelled seconds")
    parser.add_argument("--rate", type=float, default=2.0, help="poisson: requests per modelled second")
    parser.add_argument("--sla-class", choices=[c.value for c in SlaClass], default=None, help="poisson: header to send")
    parser.add_argument("--latency-rate", type=float, default=1.0, help="bursty: steady latency-class requests/s")
    parser.add_argument("--burst-rate", type=float, default=8.0, help="bursty: throughput-class requests/s while on")
    parser.add_argument("--on", type=float, default=15.0, help="bursty: on-period, modelled seconds")
    parser.add_argument("--off", type=float, default=25.0, help="bursty: off-period, modelled seconds")
    parser.add_argument("--ramp-start", type=float, default=0.1, help="ramp: requests/s at the start and the end")
    parser.add_argument("--ramp-peak", type=float, default=7.0, help="ramp: requests/s at the peak (mid-trace)")


def cmd_trace(args: argparse.Namespace) -> int:
    options = run_options(args, args.url, _label(args))
    arrivals, params = build_trace(args)
    if not arrivals:
        raise SystemExit("the trace is empty: raise --duration or the rates")
    document = run_async(trace(options, arrivals, args.kind, params, args.warmup))
    _emit(document, args)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from gateway.bench.report import plot_sweeps, plot_traces

    documents = [report.load(path) for path in args.results]
    paths = plot_sweeps(documents, args.out, args.prefix) + plot_traces(documents, args.out, args.prefix)
    (args.out / f"{args.prefix}combined.md").write_text(report.to_markdown(documents))
    (args.out / f"{args.prefix}combined.csv").write_text(report.to_csv(documents))
    print("wrote " + ", ".join(str(path) for path in paths), file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="higgs-gateway bench", description=__doc__,
                                     formatter_class=HelpFormatter)  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="TOOL", title="tools")

    p_sweep = commands.add_parser("sweep", help="closed-loop concurrency sweep", formatter_class=HelpFormatter)
    p_sweep.add_argument("url")
    p_sweep.add_argument("--levels", type=int_list, default=list(DEFAULT_LEVELS), help="concurrency levels, e.g. 1,2,4")
    p_sweep.add_argument("--requests", type=int, default=None, help="requests per level (default max(16, 2 x level))")
    p_sweep.add_argument("--warmup", type=int, default=0, help="unmeasured requests before each level")
    p_sweep.add_argument("--sla-class", choices=[c.value for c in SlaClass], default=None)
    add_client_arguments(p_sweep)
    _add_output(p_sweep)
    p_sweep.set_defaults(func=cmd_sweep)

    p_trace = commands.add_parser(
        "trace", help="open-loop arrival trace (poisson or bursty mixed classes)", formatter_class=HelpFormatter
    )
    p_trace.add_argument("url")
    p_trace.add_argument("--warmup", type=int, default=0, help="unmeasured requests before the trace")
    add_trace_arguments(p_trace)
    add_client_arguments(p_trace)
    _add_output(p_trace)
    p_trace.set_defaults(func=cmd_trace)

    p_plot = commands.add_parser(
        "plot", help="plots and combined tables from result JSON files", formatter_class=HelpFormatter
    )
    p_plot.add_argument("results", nargs="+", type=Path)
    p_plot.add_argument("--out", type=Path, default=Path("bench-out"))
    p_plot.add_argument("--prefix", default="")
    p_plot.set_defaults(func=cmd_plot)

    from gateway.bench import compare, first_audio, integrations, overhead, profile_changes, sessions, soak, targets, upload_stall

    compare.add_parser(commands)
    overhead.add_parser(commands)
    first_audio.add_parser(commands)
    sessions.add_parser(commands)
    integrations.add_parser(commands)
    profile_changes.add_parser(commands)
    upload_stall.add_parser(commands)
    soak.add_parser(commands)
    for name, (_, help_) in OWN_PARSERS.items():
        # Everything after the tool's name goes to its own parser untouched.
        commands.add_parser(name, help=help_, add_help=False, prefix_chars="\0")
    targets.add_agreement_parser(commands)
    profile_changes.add_held_mix_parser(commands)
    return parser


# Tools that parse their own command line: name -> (module with ``main(argv) -> int``, or
# ``module:function`` for another such function, help).
OWN_PARSERS: dict[str, tuple[str, str]] = {
    "decision": ("gateway.bench.decision", "how long one routing decision takes, learning on and off (µs)"),
    "encoder-cost": ("gateway.audio.cost", "CPU cost of each audio encoder per second of audio"),
    "quality-cost": ("gateway.bench.quality:main_cost", "what audio quality sampling costs the gateway's CPU at c64"),
    "quality-soak": ("gateway.bench.quality:main_soak", "a clean fleet soaked with every stream scored: no quality ejection"),
    "floor": ("gateway.bench.routers:main_floor", "the relay floor: uvicorn and the upstream client relaying to one worker"),
    "replica-kill": ("gateway.bench.replica_kill", "SIGKILL of one of three gateway replicas under load: survivors and leases"),
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.command in OWN_PARSERS:
        module, _, function = OWN_PARSERS[args.command][0].partition(":")
        return int(getattr(importlib.import_module(module), function or "main")(rest) or 0)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(args.func(args))
