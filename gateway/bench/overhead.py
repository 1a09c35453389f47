"""``higgs-gateway bench overhead``: what the gateway adds on top of a worker.

The same closed-loop load goes to one emulated high-throughput worker three ways: direct,
through the gateway, and through nginx (``proxy_buffering off``, upstream keep-alive) as
the reference for a plain streaming proxy. Reported: added TTFP (p50, p99) against
direct, and the proxy's CPU time per request and per audio second, read from
``/proc/<pid>/stat`` around the measured phase (its idle CPU, from health probes and
load scraping, measured beforehand and subtracted).

The proxy under test is pinned to one core, the worker and load generator to the other,
so the proxy's cost is not blurred by theirs. Added TTFP is wall-clock time (never scaled):
the emulator's time scale only shortens the clips so more requests fit in the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.bench import report
from gateway.bench.client import ClientOptions, RequestSpec, make_client
from gateway.bench.fleet import HT_PROFILE, Fleet, Service, free_port, tree_cpu_seconds, wait_speech
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.nginx import nginx_binary, nginx_command
from gateway.bench.progress import Progress
from gateway.bench.runner import run_closed
from gateway.bench.scenarios import requests_for, run_async
from gateway.bench.summary import summarize_phase
from gateway.bench.texts import TEXTS, text_order

TARGETS = {"added_ttfp_p50_ms": 2.0, "added_ttfp_p99_ms": 10.0, "cpu_ms_per_request": 1.0}
IDLE_SAMPLE_S = 3.0


@dataclass
class PathResult:
    name: str
    phases: list[dict[str, Any]]
    cpu: dict[int, dict[str, float]]  # concurrency -> proxy CPU figures (absent for direct)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("overhead", help="gateway vs direct vs nginx: added TTFP and CPU per request",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="emulator speed-up (shortens clips; faster than 0.25 starves the emulator at c64)")
    parser.add_argument("--levels", default="1,64", help="concurrency levels; the targets are read at the largest")
    parser.add_argument("--requests", type=int, default=None, help="requests per level (default max(16, 4 x level))")
    parser.add_argument("--rounds", type=int, default=2, help="direct/gateway/nginx are interleaved this many times")
    parser.add_argument("--no-nginx", action="store_true")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    parser.set_defaults(func=run)


def _cores(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(proxy cores, worker and load-generator cores)."""
    available = sorted(os.sched_getaffinity(0))
    if not pin or len(available) < 2:
        return None, None
    return {available[-1]}, set(available[:-1])


async def _measure(url: str, specs: list[RequestSpec], concurrency: int, label: str, progress: bool,
                   proxy: Service | None) -> tuple[dict[str, Any], dict[str, float] | None]:  # fmt: skip
    client = make_client("aiohttp", ClientOptions(url=url))
    try:
        warm = [RequestSpec(min(TEXTS, key=len))] * concurrency
        await run_closed(client, warm, concurrency, "warmup")
        idle_rate = 0.0
        if proxy is not None:
            before, start = tree_cpu_seconds(proxy.pid), time.perf_counter()
            await asyncio.sleep(IDLE_SAMPLE_S)
            idle_rate = (tree_cpu_seconds(proxy.pid) - before) / (time.perf_counter() - start)
            cpu_before = tree_cpu_seconds(proxy.pid)
        bar = Progress(f"{label} c{concurrency}", len(specs), enabled=progress)
        phase = await run_closed(client, specs, concurrency, f"c{concurrency}", bar)
        bar.close()
    finally:
        await client.close()
    summary = summarize_phase(phase)
    if proxy is None:
        return summary, None
    used = tree_cpu_seconds(proxy.pid) - cpu_before
    busy = max(0.0, used - idle_rate * phase.wall_s)
    requests, audio = max(1, summary["ok"]), max(1e-9, summary["audio_s"])
    cpu = {
        "cpu_s": used,
        "idle_cpu_s": idle_rate * phase.wall_s,
        "cpu_ms_per_request": 1000 * busy / requests,
        "cpu_ms_per_audio_s": 1000 * busy / audio,
        "cpu_ms_per_request_raw": 1000 * used / requests,
        "core_utilisation": used / phase.wall_s,
    }
    return summary, cpu


def run(args: argparse.Namespace) -> int:
    from gateway.bench.cli import int_list

    levels = int_list(args.levels)
    use_nginx = not args.no_nginx and nginx_binary() is not None
    proxy_cpus, other_cpus = _cores(not args.no_pin)
    if other_cpus:
        os.sched_setaffinity(0, other_cpus)  # the load generator stays off the proxy's core
    results: dict[str, PathResult] = {}
    with tempfile.TemporaryDirectory(prefix="higgs-overhead-") as scratch, Fleet(Path(scratch)) as fleet:
        worker = fleet.emulator("worker", HT_PROFILE, args.time_scale, other_cpus, extra=["--warm"])
        port = free_port()
        document = gateway_document(port, Path(scratch) / "data", [], [worker.url], "high_throughput_only", args.time_scale)
        gateway = fleet.gateway("gateway", write_config(document, Path(scratch) / "gateway.yaml"), port, proxy_cpus)
        wait_speech(gateway.url)
        paths: list[tuple[str, str, Service | None]] = [("direct", worker.url, None), ("gateway", gateway.url, gateway)]
        if use_nginx:
            nginx_port = free_port()
            command = nginx_command(Path(scratch) / "nginx", nginx_port, worker.url.split("//", 1)[1])
            nginx = fleet.start("nginx", command, f"http://127.0.0.1:{nginx_port}", "/health", proxy_cpus)
            paths.append(("nginx", nginx.url, nginx))
        for name, _, _ in paths:
            results[name] = PathResult(name, [], {})
        for concurrency in levels:
            count = args.requests or max(16, 4 * concurrency)
            specs = [RequestSpec(text) for text in text_order(count, args.seed)]
            merged: dict[str, list[tuple[dict[str, Any], dict[str, float] | None]]] = {n: [] for n, _, _ in paths}
            for _ in range(args.rounds):  # interleaved so drift hits every path alike
                for name, url, proxy in paths:
                    merged[name].append(run_async(_measure(url, specs, concurrency, name, not args.no_progress, proxy)))
            for name, runs in merged.items():
                results[name].phases.extend(summary for summary, _ in runs)
                cpus = [cpu for _, cpu in runs if cpu is not None]
                if cpus:
                    results[name].cpu[concurrency] = {k: sum(c[k] for c in cpus) / len(cpus) for k in cpus[0]}
    write_report(results, args, levels, use_nginx)
    return 0


def _round_mean(phases: list[dict[str, Any]], concurrency: int, stat: str) -> float | None:
    """The mean over rounds of one TTFP statistic at one level (rounds are equal in size)."""
    values = [p["ttfp_s"][stat] for p in phases if p["concurrency"] == concurrency and p["ttfp_s"][stat] is not None]
    return sum(values) / len(values) if values else None


def write_report(results: dict[str, PathResult], args: argparse.Namespace, levels: list[int], nginx: bool) -> Path:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    raw = {name: {"phases": r.phases, "cpu": r.cpu} for name, r in results.items()}
    (out / "overhead.json").write_text(json.dumps(
        {"schema": report.SCHEMA + "+overhead", "time_scale": args.time_scale, "levels": levels,
         "rounds": args.rounds, "paths": raw}, indent=2) + "\n")  # fmt: skip
    command = "higgs-gateway bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    lines = [
        "# Gateway overhead",
        "",
        f"Reproduce: `{command}`",
        "",
        (__doc__ or "").split("\n\n", 1)[1].strip(),
        "",
        f"One emulated high-throughput worker at time scale {args.time_scale:g} (clips play "
        f"{1 / args.time_scale:g}x faster than real time, so each request is short); "
        f"{args.rounds} interleaved rounds per path and level; requests per level: "
        f"{args.requests or 'max(16, 4 x concurrency)'}; load generator: aiohttp on uvloop.",
        "",
        "## Added time to first packet (wall clock, against direct)",
        "",
        "| concurrency | path | TTFP p50 (ms) | TTFP p99 (ms) | added p50 (ms) | added p99 (ms) |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for concurrency in levels:
        base50 = _round_mean(results["direct"].phases, concurrency, "median")
        base99 = _round_mean(results["direct"].phases, concurrency, "p99")
        for name, result in results.items():
            p50 = _round_mean(result.phases, concurrency, "median")
            p99 = _round_mean(result.phases, concurrency, "p99")
            added50 = "–" if name == "direct" or p50 is None or base50 is None else f"{1000 * (p50 - base50):+.2f}"
            added99 = "–" if name == "direct" or p99 is None or base99 is None else f"{1000 * (p99 - base99):+.2f}"
            lines.append(f"| {concurrency} | {name} | {_ms(p50)} | {_ms(p99)} | {added50} | {added99} |")
    lines += [
        "",
        "## Proxy CPU time",
        "",
        "| concurrency | path | CPU per request (ms) | CPU per audio second (ms) | raw CPU per request, idle included (ms) | core busy |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for concurrency in levels:
        for name, result in results.items():
            cpu = result.cpu.get(concurrency)
            if cpu:
                lines.append(
                    f"| {concurrency} | {name} | {cpu['cpu_ms_per_request']:.3f} | {cpu['cpu_ms_per_audio_s']:.4f} | "
                    f"{cpu['cpu_ms_per_request_raw']:.3f} | {100 * cpu['core_utilisation']:.0f}% |"
                )
    top = max(levels)
    lines += ["", f"## Against the targets (concurrency {top})", ""]
    lines += _verdict(results, top)
    if not nginx:
        lines += ["", "nginx was not installed, so the reference row is missing (Debian: `apt-get install nginx`)."]
    lines += ["", "## Every run", "", report.to_markdown(
        [{"label": name, "phases": r.phases} for name, r in results.items()], by_class=False)]  # fmt: skip
    path = out / "overhead.md"
    path.write_text("\n".join(lines))
    print(f"wrote {path}", file=sys.stderr)
    return path


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{1000 * value:.1f}"


def _verdict(results: dict[str, PathResult], top: int) -> list[str]:
    gateway = results.get("gateway")
    if gateway is None:
        return ["(no gateway run)"]
    base50 = _round_mean(results["direct"].phases, top, "median")
    base99 = _round_mean(results["direct"].phases, top, "p99")
    p50 = _round_mean(gateway.phases, top, "median")
    p99 = _round_mean(gateway.phases, top, "p99")
    cpu = gateway.cpu.get(top, {}).get("cpu_ms_per_request")
    measured = {
        "added_ttfp_p50_ms": None if p50 is None or base50 is None else 1000 * (p50 - base50),
        "added_ttfp_p99_ms": None if p99 is None or base99 is None else 1000 * (p99 - base99),
        "cpu_ms_per_request": cpu,
    }
    lines = ["| measure | target | measured | met |", "|---|---:|---:|---|"]
    for key, target in TARGETS.items():
        value = measured[key]
        shown = "–" if value is None else f"{value:.2f}"
        met = "–" if value is None else ("yes" if value < target else "**no**")
        lines.append(f"| {key} | < {target:g} | {shown} | {met} |")
    return lines
