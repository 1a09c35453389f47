"""``higgs-gateway bench compare``: routing policies on equal (emulated) hardware.

Every configuration gets two fresh emulated workers and its own gateway, then the same
closed-loop sweep and the same bursty mixed-class trace:

- ``adaptive``: one low-latency + one high-throughput worker, the default policy (ours);
- ``ht+ht``: two high-throughput workers (everything on the throughput profile);
- ``ll+ll``: two low-latency workers, slots opened up to the profile's max_num_seqs;
- ``rules``: one low-latency + one high-throughput worker, the first build's threshold rules;
- ``round_robin``: one low-latency + one high-throughput worker, alternating blindly;
- ``adaptive-2r``, ``adaptive-3r``: ``adaptive``'s fleet behind 2 or 3 gateway replicas on one
  Redis, nginx round robin in front (redis-server and nginx);
- ``vllm-router-p2``, ``vllm-router-rr``, ``nginx-least-conn``: the same 1 + 1 fleet behind the
  routers people would use instead, no gateway: vLLM's ``vllm-router`` (``power_of_two``,
  ``round_robin``; the ``bench`` extra) and nginx ``least_conn``;
- ``ht+ht-vllm-router``: two high-throughput workers behind ``vllm-router`` (``power_of_two``),
  the operator's alternative to a mixed fleet.

A setup whose tool is not installed is skipped, and the report says so.

The report (tables, plots, the command and the emulator parameters) goes to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.bench import report, voice_clone
from gateway.bench.arguments import add_quiet_arguments, int_list, wait_for_quiet
from gateway.bench.client import ClientOptions
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE, Fleet, emulator_command, free_port, wait_speech
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.scenarios import DEFAULT_LEVELS, RunOptions, run_async, sweep, trace, warm_up
from gateway.bench.targets import ADAPTIVE, REFERENCES, RUN_ID, new_run_id, replicas_table, targets_table
from gateway.bench.workload import RAMP_MIX, Arrival, bursty, ramp
from gateway.bench.routers import INSTALL_HINT, nginx_binary, nginx_command, vllm_router_binary, vllm_router_command
from gateway.help_format import HelpFormatter


@dataclass(frozen=True)
class Setup:
    name: str
    policy: str
    profiles: tuple[str, str]  # worker 1, worker 2
    ll_slots: int | None = None  # None = the gateway's default
    summary: str = ""
    # Gateway replicas sharing one Redis behind nginx round robin (1: one gateway, no proxy).
    replicas: int = 1
    # What routes: the gateway, or another router in front of the workers (``policy`` is then
    # that router's: vllm-router's --policy, or nginx's balancing method).
    router: str = "gateway"


GATEWAY, VLLM_ROUTER, NGINX = "gateway", "vllm-router", "nginx"


SETUPS = (
    Setup("adaptive", "adaptive", (LL_PROFILE, HT_PROFILE), summary="1 low-latency + 1 high-throughput, adaptive"),
    Setup("ht+ht", "high_throughput_only", (HT_PROFILE, HT_PROFILE), summary="2 high-throughput"),
    Setup("ll+ll", "low_latency_only", (LL_PROFILE, LL_PROFILE), ll_slots=16,
          summary="2 low-latency, 16 slots per worker (the profile's max_num_seqs)"),
    # The first build's threshold policy (4 low-latency slots), kept to compare old and new.
    Setup("rules", "rules", (LL_PROFILE, HT_PROFILE), ll_slots=4,
          summary="1 low-latency + 1 high-throughput, the first build's threshold rules, 4 low-latency slots"),
    Setup("round_robin", "round_robin", (LL_PROFILE, HT_PROFILE), summary="1 low-latency + 1 high-throughput, round robin"),
    # The same fleet and policy as `adaptive`, routed by several gateways that share Redis.
    Setup("adaptive-2r", "adaptive", (LL_PROFILE, HT_PROFILE), replicas=2,
          summary="1 low-latency + 1 high-throughput, adaptive, 2 gateway replicas behind nginx round robin"),
    Setup("adaptive-3r", "adaptive", (LL_PROFILE, HT_PROFILE), replicas=3,
          summary="1 low-latency + 1 high-throughput, adaptive, 3 gateway replicas behind nginx round robin"),
)  # fmt: skip

# The routers people would use instead of the gateway, in front of the same two workers.
# Kept apart from SETUPS, which the simulator also runs (it models the gateway only).
ROUTER_SETUPS = (
    Setup("vllm-router-p2", "power_of_two", (LL_PROFILE, HT_PROFILE), router=VLLM_ROUTER,
          summary="1 low-latency + 1 high-throughput behind vLLM's router, power of two choices"),
    Setup("vllm-router-rr", "round_robin", (LL_PROFILE, HT_PROFILE), router=VLLM_ROUTER,
          summary="1 low-latency + 1 high-throughput behind vLLM's router, round robin"),
    Setup("nginx-least-conn", "least_conn", (LL_PROFILE, HT_PROFILE), router=NGINX,
          summary="1 low-latency + 1 high-throughput behind nginx, least connections"),
    Setup("ht+ht-vllm-router", "power_of_two", (HT_PROFILE, HT_PROFILE), router=VLLM_ROUTER,
          summary="2 high-throughput behind vLLM's router, power of two choices"),
)  # fmt: skip
COMPARED = SETUPS + ROUTER_SETUPS


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("compare", help="routing policies on equal emulated hardware, one report",
                                 description=__doc__, formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks/comparison"))
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="emulator speed-up (0.25 = four times real time; faster starves the emulators at c64)")
    parser.add_argument("--setups", default=",".join(s.name for s in COMPARED),
                        help="comma-separated subset; adaptive brings its references (ht+ht, ll+ll) along")
    parser.add_argument("--no-references", action="store_true",
                        help="measure only the named setups; the targets table then reads the references' "
                             "earlier results from --out and marks every target not comparable")
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)))
    parser.add_argument("--requests", type=int, default=None, help="requests per level (default max(MINIMUM, ROUNDS x level))")
    # 4 rounds: the committed reports' length. A share of the better static fleet read at 4
    # rounds carries each level's closing wave; 12 rounds and 192 requests read the steady
    # state, as the simulator's seed sweep and its ceiling do (docs/benchmarks/simulator.md).
    parser.add_argument("--rounds", type=int, default=4, help="sweep: requests per level = ROUNDS x level...")
    parser.add_argument("--minimum", type=int, default=32, help="...and at least this many")
    parser.add_argument("--trace-duration", type=float, default=120.0, help="bursty trace, modelled seconds (0 = skip)")
    parser.add_argument("--latency-rate", type=float, default=1.0)
    parser.add_argument("--burst-rate", type=float, default=8.0)
    parser.add_argument("--on", type=float, default=15.0)
    parser.add_argument("--off", type=float, default=25.0)
    add_ramp_arguments(parser)
    voice_clone.add_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    add_quiet_arguments(parser)
    parser.add_argument("--report-only", action="store_true", help="re-render README.md from the JSON files in --out")
    parser.set_defaults(func=run)


def chosen_setups(spec: str, references: bool = True) -> list[Setup]:
    """The setups named in ``spec``; with ``references``, adaptive brings ht+ht and ll+ll along,
    because its targets only count against fleets measured in the same run."""
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = set(names) - {s.name for s in COMPARED}
    if unknown:
        raise SystemExit(f"unknown setups: {', '.join(sorted(unknown))}")
    if ADAPTIVE in names and references:
        names += REFERENCES
    return [s for s in COMPARED if s.name in names]


def missing_tool(setup: Setup) -> str | None:
    """Why ``setup`` cannot run here (a tool it needs is not installed), or None."""
    if setup.router == VLLM_ROUTER and vllm_router_binary() is None:
        return f"vllm-router is not installed ({INSTALL_HINT})"
    if (setup.router == NGINX or setup.replicas > 1) and nginx_binary() is None:
        return "nginx is not installed (Debian: apt-get install nginx)"
    if setup.replicas > 1 and shutil.which("redis-server") is None:
        return "redis-server is not installed (Debian: apt-get install redis-server)"
    return None


def run(args: argparse.Namespace) -> int:
    setups = chosen_setups(args.setups, references=not args.no_references)
    levels = int_list(args.levels)
    arrivals = (
        bursty(args.trace_duration, args.seed, args.latency_rate, args.burst_rate, args.on, args.off)
        if args.trace_duration > 0
        else []
    )
    trace_params = {"kind": "bursty", "duration_s": args.trace_duration, "latency_rate": args.latency_rate,
                    "burst_rate": args.burst_rate, "on_s": args.on, "off_s": args.off}  # fmt: skip
    traces = [(arrivals, trace_params), ramp_trace(args)]
    traces = [(a, p) for a, p in traces if a]
    documents: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    skipped = {setup.name: reason for setup in setups if (reason := missing_tool(setup))}
    for name, reason in skipped.items():
        print(f"{name}: skipped: {reason}", file=sys.stderr)
    if args.report_only:
        for setup in setups:
            documents += stored(args.out, setup.name)
        documents += [report.load(p) for p in sorted(args.out.glob("voice-clone-*.json"))]
        write_report(documents, args, setups, levels)
        return 0
    run_id = new_run_id()
    with tempfile.TemporaryDirectory(prefix="higgs-bench-") as scratch:
        for setup in (s for s in setups if s.name not in skipped):
            try:
                documents += _measure(setup, Path(scratch), args, levels, traces, run_id)
            except (RuntimeError, TimeoutError) as exc:  # one broken setup must not lose the others
                failures[setup.name] = str(exc).strip().splitlines()[0][:300]
                print(f"{setup.name}: failed: {failures[setup.name]}", file=sys.stderr)
        if args.voice_clone_duration > 0:
            try:
                notes = {"command": _command(), "emulator_timing": timing_parameters(), RUN_ID: run_id}
                documents += voice_clone.measure(Path(scratch), args, notes)
            except (RuntimeError, TimeoutError) as exc:
                failures["voice-clone"] = str(exc).strip().splitlines()[0][:300]
                print(f"voice-clone: failed: {failures['voice-clone']}", file=sys.stderr)
    measured = {s.name for s in setups}
    for name in REFERENCES if ADAPTIVE in measured else ():
        if name not in measured:  # --no-references: earlier rows, shown as not comparable
            documents += stored(args.out, name)
    write_report(documents, args, setups, levels, failures, skipped)
    print(f"wrote {args.out / 'README.md'}", file=sys.stderr)
    return 0


def _command() -> str:
    """The command line that produced this run, as a user would type it."""
    return "higgs-gateway bench " + " ".join(shlex.quote(a) for a in sys.argv[2:] if a != "--report-only")


def _measure(setup: Setup, scratch: Path, args: argparse.Namespace, levels: list[int],
             traces: list[tuple[list[Arrival], dict[str, Any]]], run_id: str) -> list[dict[str, Any]]:  # fmt: skip
    """Start the setup's fleet, run the sweep and the traces, write every result."""
    documents = []
    wait_for_quiet(args.quiet_load, args.quiet_wait)
    with Fleet(scratch / setup.name.replace("+", "_")) as fleet:
        url = start_setup(fleet, setup, args.time_scale)
        options = RunOptions(
            ClientOptions(url=url), setup.name, time_scale=args.time_scale, seed=args.seed,
            progress=not args.no_progress,
            notes={"setup": setup.summary, "policy": setup.policy, "command": _command(),
                   "emulator_timing": timing_parameters(), RUN_ID: run_id},
        )  # fmt: skip
        # Connections, caches and the policy's state settle before measuring.
        run_async(warm_up(options, max(levels)))
        document = run_async(sweep(options, levels, args.requests, rounds=args.rounds, minimum=args.minimum))
        report.write(document, args.out, f"{setup.name}-sweep")
        documents.append(document)
        for arrivals, params in traces:
            document = run_async(trace(options, arrivals, params["kind"], params))
            report.write(document, args.out, trace_file(setup.name, params["kind"]))
            documents.append(document)
    return documents


def stored(out: Path, setup: str) -> list[dict[str, Any]]:
    """One setup's results in ``out``, by exact name (``adaptive-*`` would also match ``adaptive-2r``'s)."""
    names = [f"{setup}-sweep", trace_file(setup, "bursty"), trace_file(setup, "ramp")]
    return [report.load(out / f"{name}.json") for name in names if (out / f"{name}.json").exists()]


def trace_file(setup: str, kind: str) -> str:
    """``NAME-trace`` for the bursty trace (the name earlier reports used), ``NAME-KIND`` otherwise."""
    return f"{setup}-trace" if kind == "bursty" else f"{setup}-{kind}"


def add_ramp_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ramp-duration", type=float, default=240.0, help="ramp trace, modelled seconds (0 = skip)")
    parser.add_argument("--ramp-low", type=float, default=0.1, help="ramp: requests/s at the start and the end")
    parser.add_argument("--ramp-high", type=float, default=7.0, help="ramp: requests/s at the peak (past capacity)")


def ramp_trace(args: argparse.Namespace) -> tuple[list[Arrival], dict[str, Any]]:
    if args.ramp_duration <= 0:
        return [], {}
    arrivals = ramp(args.ramp_duration, args.seed, args.ramp_low, args.ramp_high)
    params = {"kind": "ramp", "duration_s": args.ramp_duration, "start_rate": args.ramp_low,
              "peak_rate": args.ramp_high, "mix": {c.value: w for c, w in RAMP_MIX}}  # fmt: skip
    return arrivals, params


def start_setup(fleet: Fleet, setup: Setup, time_scale: float, sessions: dict[str, Any] | None = None) -> str:
    """Start the setup's two emulated workers and its gateway; returns the gateway's URL."""
    # --warm: every lazy graph already captured, as the supervisor's warm-up leaves a worker.
    workers = [fleet.emulator(f"worker{i}", profile, time_scale, extra=["--warm"])
               for i, profile in enumerate(setup.profiles, 1)]  # fmt: skip
    if setup.router != GATEWAY:
        return _start_router(fleet, setup, [w.url for w in workers])
    ll = [w.url for w, p in zip(workers, setup.profiles, strict=True) if p == LL_PROFILE]
    ht = [w.url for w, p in zip(workers, setup.profiles, strict=True) if p == HT_PROFILE]
    if setup.replicas > 1:
        return _start_replicas(fleet, setup, ll, ht, time_scale, sessions)
    port = free_port()
    document = gateway_document(port, fleet.work_dir / "data", ll, ht, setup.policy, time_scale, setup.ll_slots,
                                sessions=sessions)  # fmt: skip
    config = write_config(document, fleet.work_dir / "gateway.yaml")
    gateway = fleet.gateway("gateway", config, port)
    wait_speech(gateway.url)
    return gateway.url


def _start_replicas(fleet: Fleet, setup: Setup, ll: list[str], ht: list[str], time_scale: float,
                    sessions: dict[str, Any] | None) -> str:  # fmt: skip
    """``setup.replicas`` gateways on one Redis, behind nginx round robin; returns nginx's URL."""
    redis_url = fleet.redis()
    addresses = []
    for index in range(1, setup.replicas + 1):
        port = free_port()
        document = gateway_document(port, fleet.work_dir / f"data{index}", ll, ht, setup.policy, time_scale,
                                    setup.ll_slots, sessions=sessions)  # fmt: skip
        document["state"] = {"backend": "redis", "redis_url": redis_url}
        config = write_config(document, fleet.work_dir / f"gateway{index}.yaml")
        wait_speech(fleet.gateway(f"gateway{index}", config, port).url)
        addresses.append(f"127.0.0.1:{port}")
    nginx_port = free_port()
    command = nginx_command(fleet.work_dir / "nginx", nginx_port, addresses)
    proxy = fleet.start("nginx", command, f"http://127.0.0.1:{nginx_port}", "/health")
    wait_speech(proxy.url)
    return proxy.url


def _start_router(fleet: Fleet, setup: Setup, workers: list[str]) -> str:
    """Another router, no gateway, in front of ``workers``; returns its URL."""
    port = free_port()
    if setup.router == VLLM_ROUTER:
        command = vllm_router_command(port, workers, setup.policy, metrics_port=free_port())
    else:
        addresses = [url.split("//", 1)[1] for url in workers]
        command = nginx_command(fleet.work_dir / "nginx", port, addresses, balance=setup.policy)
    proxy = fleet.start(setup.router, command, f"http://127.0.0.1:{port}", "/health")
    wait_speech(proxy.url)
    return proxy.url


def timing_parameters() -> dict[str, Any]:
    """The emulator's timing model as this checkout defines it (recorded with each run)."""
    try:
        from gateway.worker.timing import TimingParams
    except ImportError:  # the emulator's model is optional for reading old results
        return {}
    return {name: repr(value) for name, value in dataclasses.asdict(TimingParams()).items()}


def _emulator_parameters(documents: list[dict[str, Any]]) -> str:
    recorded = [d["notes"]["emulator_timing"] for d in documents if d.get("notes", {}).get("emulator_timing")]
    fields = recorded[0] if recorded else timing_parameters()
    if not fields:
        return ""
    lines = ["| parameter | value |", "|---|---|"]
    lines += [f"| `{name}` | `{value}` |" for name, value in fields.items()]
    return "\n".join(lines)


def _stat(phase: dict[str, Any] | None, metric: str, stat: str, scale: float = 1.0, digits: int = 0) -> str:
    value = None if phase is None else phase[metric][stat]
    return "–" if value is None else f"{value * scale:.{digits}f}"


def headline(documents: list[dict[str, Any]], levels: list[int]) -> list[str]:
    """One row per setup: the figures the comparison is about."""
    low, high = min(levels), max(levels)
    lines = [
        f"| config | c{low} TTFP p50 (ms) | c{low} RTF mean | c{high} TTFP p99 (ms) | c{high} RTF mean | "
        f"c{high} audio-s/s | trace `latency` TTFP p50 / p99 (ms) | trace `latency` RTF mean | "
        "trace `throughput` TTFP p99 (ms) | trace errors | max load average |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label in dict.fromkeys(d["label"] for d in documents if d.get("params", {}).get("kind") != "voice_clone"):
        sweep_doc = next((d for d in documents if d["label"] == label and d["mode"] == "sweep"), None)
        trace_doc = next((d for d in documents if d["label"] == label and d["mode"] == "trace"
                          and d["params"].get("kind") == "bursty"), None)  # fmt: skip
        by_level = {p["concurrency"]: p for p in sweep_doc["phases"]} if sweep_doc else {}
        first, last = by_level.get(low), by_level.get(high)
        trace_phase = trace_doc["phases"][0] if trace_doc else None
        classes = trace_phase.get("by_class", {}) if trace_phase else {}
        latency, throughput = classes.get("latency"), classes.get("throughput")
        errors = "–" if trace_phase is None else str(sum(trace_phase["errors"].values()))
        loads = [p.get("loadavg_1m") for d in (sweep_doc, trace_doc) if d for p in d["phases"]]
        load = max((v for v in loads if v is not None), default=None)
        audio = "–" if last is None else f"{last['audio_s_per_s']:.1f}"
        lines.append(
            f"| {label} | {_stat(first, 'ttfp_s', 'median', 1000)} | {_stat(first, 'rtf', 'mean', digits=3)} | "
            f"{_stat(last, 'ttfp_s', 'p99', 1000)} | {_stat(last, 'rtf', 'mean', digits=3)} | {audio} | "
            f"{_stat(latency, 'ttfp_s', 'median', 1000)} / {_stat(latency, 'ttfp_s', 'p99', 1000)} | "
            f"{_stat(latency, 'rtf', 'mean', digits=3)} | "
            f"{_stat(throughput, 'ttfp_s', 'p99', 1000)} | {errors} | {'–' if load is None else f'{load:.1f}'} |"
        )
    return lines


def write_report(documents: list[dict[str, Any]], args: argparse.Namespace, setups: list[Setup], levels: list[int],
                 failures: dict[str, str] | None = None, skipped: dict[str, str] | None = None) -> Path:  # fmt: skip
    from gateway.bench.report import plot_sweeps, plot_timeline, plot_traces

    out: Path = args.out
    plots = plot_sweeps(documents, out) + plot_traces(documents, out, kind="bursty") + plot_timeline(documents, out)
    sweeps = [d for d in documents if d["mode"] == "sweep"]
    traces = [d for d in documents if d["mode"] == "trace" and d["params"].get("kind") == "bursty"]
    ramps = [d for d in documents if d["mode"] == "trace" and d["params"].get("kind") == "ramp"]
    recorded = [d["notes"]["command"] for d in documents if d.get("notes", {}).get("command")]
    command = recorded[0] if recorded else _command()
    lines = [
        "# Routing policies on equal hardware (emulated)",
        "",
        f"Reproduce: `{command}`",
        "",
        report.units_note(args.time_scale),
        "",
    ]
    lines += [f"**{name} failed to run:** `{reason}`\n" for name, reason in (failures or {}).items()]
    lines += [f"**{name} skipped:** {reason}.\n" for name, reason in (skipped or {}).items()]
    if sweeps or traces or ramps:  # a voice-clone-only run (--setups "") has none of these
        lines += [
            "Every configuration has exactly two workers (two GPUs' worth) behind its own gateway (or",
            "the router it names), fresh emulator processes, and receives the same requests (same seed).",
            "",
            "| config | workers and policy |",
            "|---|---|",
            *[f"| {s.name} | {s.summary} (`{s.policy}`) |" for s in setups],
            "",
            "## Summary",
            "",
            *headline(documents, levels),
            "",
            *targets_table(documents),
            *replicas_table(documents),
            "## Closed-loop sweep",
            "",
            f"Concurrency {', '.join(map(str, levels))}; requests per level "
            f"{args.requests or f'max({args.minimum}, {args.rounds} x concurrency)'}; no `x-sla-class` header (class `balanced`).",
            "",
            report.to_markdown(sweeps, by_class=False),
            *[f"![{p.stem}]({p.name})" for p in plots if p.stem != "trace_ttfp"],
            "",
        ]
    if traces:
        lines += [
            "## Bursty mixed-class trace (open loop)",
            "",
            f"{args.trace_duration:g} modelled seconds: `latency` requests arrive as a steady Poisson "
            f"stream at {args.latency_rate:g}/s; `throughput` requests arrive at {args.burst_rate:g}/s "
            f"during {args.on:g} s bursts separated by {args.off:g} s pauses.",
            "",
            report.to_markdown(traces, by_class=True),
            *[f"![{p.stem}]({p.name})" for p in plots if p.stem == "trace_ttfp"],
            "",
        ]
    if ramps:
        params = ramps[0]["params"]
        lines += [
            "## Load ramp (open loop)",
            "",
            f"{params['duration_s']:g} modelled seconds: arrivals rise linearly from {params['start_rate']:g}/s to "
            f"{params['peak_rate']:g}/s (past what two workers serve) and back down; classes mixed "
            + ", ".join(f"`{name}` {share:.0%}" for name, share in params["mix"].items()) + ". "
            "The plot shows, window by window, the audio delivered, TTFP p99 per class and the share "
            "of requests sent to the low-latency pool.",
            "",
            report.to_markdown(ramps, by_class=True),
            *[f"![{p.stem}]({p.name})" for p in plots if p.stem == "ramp_timeline"],
            "",
        ]
    lines += voice_clone.section(documents)
    example = emulator_command(0, LL_PROFILE, args.time_scale)
    lines += [
        "## Emulator",
        "",
        "Each worker is `" + " ".join(["higgs-gateway", *example[3:]]).replace(" --port 0", " --port PORT") + "`",
        "(high-throughput workers with the high-throughput profile), plus `--warm` (lazy graphs",
        "already captured, as after the supervisor's warm-up). Its timing model's parameters:",
        "",
        _emulator_parameters(documents),
        "",
        f"Machine: {documents[0]['machine'] if documents else 'unknown'}; load generator, gateway and both "
        "emulated workers share it.",
        "",
    ]
    path = out / "README.md"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path
