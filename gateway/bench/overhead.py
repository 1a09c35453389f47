"""``higgs-gateway bench overhead``: what the gateway adds on top of a worker.

The same closed-loop load goes to one emulated high-throughput worker four ways: direct,
through the gateway, through nginx (``proxy_buffering off``, upstream keep-alive) as
the reference for a plain streaming proxy, and through the relay floor: the gateway's own
server stack (uvicorn, httptools, uvloop) and upstream client relaying the bytes and doing
nothing else, the least any gateway built this way costs. Reported: added TTFP (p50, p99) against
direct, and the proxy's CPU time per request and per audio second, read from
``/proc/<pid>/stat`` around each measured phase (its idle CPU, from health probes and
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
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.bench.arguments import add_quiet_arguments, int_list, wait_for_quiet
from gateway.bench.client import ClientOptions, RequestSpec, make_client
from gateway.bench.fleet import HT_PROFILE, Fleet, Service, free_port, tree_cpu_seconds, wait_speech
from gateway.bench.gateway_config import gateway_document, write_config
from gateway.bench.routers import floor_command, nginx_binary, nginx_command
from gateway.bench.scenarios import Progress, run_async, run_closed
from gateway.bench.summary import summarize_phase
from gateway.bench.workload import SHORT_TEXTS, TEXTS, text_order
from gateway.help_format import HelpFormatter

IDLE_SAMPLE_S = 5.0


@dataclass(frozen=True)
class Workload:
    name: str
    concurrency: int
    short: bool = False


@dataclass
class Run:
    """One path, one workload, one round."""

    summary: dict[str, Any]
    cpu_s: float | None = None  # proxy CPU during the phase (None: direct)
    idle_cpu_s: float | None = None  # its idle rate x the phase's wall time


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("overhead", help="gateway vs direct, nginx and the relay floor: added TTFP and CPU per request",
                                 description=__doc__, formatter_class=HelpFormatter)  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="emulator speed-up (shortens clips; faster than 0.25 starves the emulator at c64)")  # fmt: skip
    parser.add_argument("--levels", default="1,64", help="concurrency levels (full text mix); targets are read at the largest")
    parser.add_argument("--requests", type=int, default=None, help="requests per phase (default max(16, 4 x level))")
    parser.add_argument("--rounds", type=int, default=3, help="the paths are interleaved this many times")
    parser.add_argument("--no-short", action="store_true", help="skip the short-clip phase at the largest level")
    parser.add_argument("--no-nginx", action="store_true")
    parser.add_argument("--no-floor", action="store_true", help="skip the relay floor (uvicorn and the upstream client alone)")
    parser.add_argument("--redis", action="store_true",
                        help="also a gateway with state.backend: redis (the replicas' shared in-flight view), "
                             "to read its added CPU and TTFP beside the local backend's")  # fmt: skip
    parser.add_argument("--processes", type=int, default=1,
                        help="N > 1: also a gateway of N processes on one port (server.processes, on Redis); "
                             "with --no-pin, or its processes share the one proxy core")  # fmt: skip
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    add_quiet_arguments(parser, load=1.0, before="first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--report-only", action="store_true", help="re-render overhead.md from overhead.json in --out")
    parser.set_defaults(func=run)


def _cores(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(proxy cores, worker and load-generator cores)."""
    available = sorted(os.sched_getaffinity(0))
    if not pin or len(available) < 2:
        return None, None
    return {available[-1]}, set(available[:-1])


async def _measure(url: str, specs: list[RequestSpec], workload: Workload, label: str, progress: bool,
                   proxy: Service | None) -> Run:  # fmt: skip
    client = make_client("aiohttp", ClientOptions(url=url))
    try:
        # Open the connections (client and proxy upstream pools) before measuring.
        await run_closed(client, [RequestSpec(min(TEXTS, key=len))] * workload.concurrency, workload.concurrency, "warm")
        idle_rate = cpu_before = 0.0
        if proxy is not None:
            before, start = tree_cpu_seconds(proxy.pid), time.perf_counter()
            await asyncio.sleep(IDLE_SAMPLE_S)
            idle_rate = (tree_cpu_seconds(proxy.pid) - before) / (time.perf_counter() - start)
            cpu_before = tree_cpu_seconds(proxy.pid)
        bar = Progress(f"{label} {workload.name}", len(specs), enabled=progress)
        phase = await run_closed(client, specs, workload.concurrency, workload.name, bar)
        bar.close()
    finally:
        await client.close()
    summary = summarize_phase(phase)
    if proxy is None:
        return Run(summary)
    return Run(summary, tree_cpu_seconds(proxy.pid) - cpu_before, idle_rate * phase.wall_s)


def workloads(levels: list[int], short: bool) -> list[Workload]:
    chosen = [Workload(f"c{level}", level) for level in levels]
    if short:
        chosen.append(Workload(f"c{max(levels)}-short", max(levels), short=True))
    return chosen


def run(args: argparse.Namespace) -> int:
    if args.report_only:
        document = json.loads((args.out / "overhead.json").read_text())
        write_report(document, args.out / "overhead.md", document.get("command", "overhead"), __doc__ or "")
        return 0
    plan = workloads(int_list(args.levels), not args.no_short)
    use_nginx = not args.no_nginx and nginx_binary() is not None
    proxy_cpus, other_cpus = _cores(not args.no_pin)
    if other_cpus:
        os.sched_setaffinity(0, other_cpus)  # the load generator stays off the proxy's core
    runs: dict[str, dict[str, list[Run]]] = {}
    wait_for_quiet(args.quiet_load, args.quiet_wait)
    with tempfile.TemporaryDirectory(prefix="higgs-overhead-") as scratch, Fleet(Path(scratch)) as fleet:
        worker = fleet.emulator("worker", HT_PROFILE, args.time_scale, other_cpus, extra=["--warm"])
        port = free_port()
        config = gateway_document(port, Path(scratch) / "data", [], [worker.url], "high_throughput_only", args.time_scale)
        gateway = fleet.gateway("gateway", write_config(config, Path(scratch) / "gateway.yaml"), port, proxy_cpus)
        wait_speech(gateway.url)
        paths: list[tuple[str, str, Service | None]] = [("direct", worker.url, None), ("gateway", gateway.url, gateway)]
        if args.redis:
            port = free_port()
            config = gateway_document(port, Path(scratch) / "data-redis", [], [worker.url], "high_throughput_only",
                                      args.time_scale)  # fmt: skip
            config["state"] = {"backend": "redis", "redis_url": fleet.redis()}
            shared = fleet.gateway("gateway-redis", write_config(config, Path(scratch) / "gateway-redis.yaml"), port,
                                   proxy_cpus)  # fmt: skip
            wait_speech(shared.url)
            paths.append(("gateway-redis", shared.url, shared))
        if args.processes > 1:
            port, name = free_port(), f"gateway-{args.processes}p"
            config = gateway_document(port, Path(scratch) / "data-processes", [], [worker.url], "high_throughput_only",
                                      args.time_scale)  # fmt: skip
            config["state"] = {"backend": "redis", "redis_url": fleet.redis(f"redis-{name}")}
            config["server"]["processes"] = args.processes
            several = fleet.gateway(name, write_config(config, Path(scratch) / f"{name}.yaml"), port, proxy_cpus)
            wait_speech(several.url)
            paths.append((name, several.url, several))
        if not args.no_floor:
            floor_port = free_port()
            floor = fleet.start("floor", floor_command(floor_port, worker.url), f"http://127.0.0.1:{floor_port}", "/health",
                                proxy_cpus)  # fmt: skip
            paths.append(("floor", floor.url, floor))
        if use_nginx:
            nginx_port = free_port()
            command = nginx_command(Path(scratch) / "nginx", nginx_port, worker.url.split("//", 1)[1])
            nginx = fleet.start("nginx", command, f"http://127.0.0.1:{nginx_port}", "/health", proxy_cpus)
            paths.append(("nginx", nginx.url, nginx))
        runs = {name: {w.name: [] for w in plan} for name, _, _ in paths}
        for workload in plan:
            count = args.requests or max(16, 4 * workload.concurrency)
            if workload.short:
                count *= 4  # short clips are cheap in wall time and need more requests for CPU ticks
            texts = text_order(count, args.seed, SHORT_TEXTS if workload.short else TEXTS)
            specs = [RequestSpec(text) for text in texts]
            for _ in range(args.rounds):  # interleaved so drift hits every path alike
                for name, url, proxy in paths:
                    runs[name][workload.name].append(
                        run_async(_measure(url, specs, workload, name, not args.no_progress, proxy))
                    )
    document = {
        "schema": "higgs-gateway-bench-overhead/1",
        "time_scale": args.time_scale,
        "rounds": args.rounds,
        "workloads": [vars(w) for w in plan],
        "machine": f"{os.cpu_count()}-core {os.uname().machine}",
        "command": " ".join(sys.argv[2:]) or "overhead",
        "runs": {path: {name: [vars(r) for r in rs] for name, rs in per.items()} for path, per in runs.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overhead.json").write_text(json.dumps(document, indent=2) + "\n")
    path = write_report(document, args.out / "overhead.md", document["command"], __doc__ or "")
    print(f"wrote {path}", file=sys.stderr)
    return 0


# ---- the report: pure arithmetic over the runs recorded ---------------------------------
# The overhead report: pure arithmetic over the runs ``bench overhead`` recorded.
#
# Added TTFP is the mean over rounds of (proxy - direct) in the same round, so slow drift
# of the shared machine cancels; the spread of direct's own rounds is printed beside it as
# the noise floor. CPU is pooled over rounds (sum of busy CPU / sum of requests) because
# the kernel counts CPU in 10 ms ticks, too coarse for one short phase.
# 

TARGETS = {"added TTFP p50 (ms)": 2.0, "added TTFP p99 (ms)": 10.0, "CPU per request (ms)": 1.0}
TICK_S = 0.01
# Below this many ticks of busy CPU (after removing idle) a per-request figure is noise.
MIN_TICKS = 100


def _ttfp(run: dict[str, Any], stat: str) -> float | None:
    value = run["summary"]["ttfp_s"][stat]
    return None if value is None else 1000 * value


def ttfp_table(document: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """workload -> path -> p50, p99, added_p50, added_p99 (ms) and direct's spread."""
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    direct = document["runs"]["direct"]
    for workload in (w["name"] for w in document["workloads"]):
        rows: dict[str, dict[str, float | None]] = {}
        for path, per in document["runs"].items():
            row: dict[str, float | None] = {}
            for stat, key in (("median", "p50"), ("p99", "p99")):
                mine = [_ttfp(run, stat) for run in per[workload]]
                base = [_ttfp(run, stat) for run in direct[workload]]
                row[key] = _mean([v for v in mine if v is not None])
                pairs = [m - b for m, b in zip(mine, base, strict=True) if m is not None and b is not None]
                row[f"added_{key}"] = None if path == "direct" else _mean(pairs)
            loads = [run["summary"].get("loadavg_1m") for run in per[workload]]
            row["load"] = max((v for v in loads if v is not None), default=None)
            if path == "direct":
                p50s = [v for v in (_ttfp(run, "median") for run in per[workload]) if v is not None]
                row["spread_p50"] = max(p50s) - min(p50s) if len(p50s) > 1 else None
            rows[path] = row
        table[workload] = rows
    return table


def cpu_table(document: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """workload -> proxy path -> CPU per request / per audio second (ms), pooled over rounds."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for workload in (w["name"] for w in document["workloads"]):
        rows = {}
        for path, per in document["runs"].items():
            runs = [run for run in per[workload] if run["cpu_s"] is not None]
            if not runs:
                continue
            used = sum(run["cpu_s"] for run in runs)
            busy = sum(max(0.0, run["cpu_s"] - run["idle_cpu_s"]) for run in runs)
            requests = sum(run["summary"]["ok"] for run in runs) or 1
            audio = sum(run["summary"]["audio_s"] for run in runs) or 1e-9
            wall = sum(run["summary"]["wall_s"] for run in runs) or 1e-9
            rows[path] = {
                "per_request_ms": 1000 * busy / requests,
                "per_audio_s_ms": 1000 * busy / audio,
                "raw_per_request_ms": 1000 * used / requests,
                "audio_s_per_request": audio / requests,
                "core_busy": used / wall,
                "busy_ticks": busy / TICK_S,
            }
        table[workload] = rows
    return table


def split_cost(long: dict[str, float], short: dict[str, float]) -> tuple[float, float] | None:
    """(fixed ms per request, ms per audio second) from two workloads of different clip lengths."""
    spread = long["audio_s_per_request"] - short["audio_s_per_request"]
    if spread <= 0:
        return None
    per_audio = (long["per_request_ms"] - short["per_request_ms"]) / spread
    return short["per_request_ms"] - per_audio * short["audio_s_per_request"], per_audio


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _f(value: float | None, digits: int = 1, sign: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _above_floor(splits: dict[str, tuple[float, float] | None]) -> list[str]:
    """The gateway's fixed cost beside the floor's (``split_cost`` per path): how much of it is its own work."""
    gateway, floor = splits.get("gateway"), splits.get("floor")
    if gateway is None or floor is None:
        return []
    return ["", f"Of the gateway's fixed {gateway[0]:.2f} ms per request, {floor[0]:.2f} ms is the relay floor (uvicorn, "
            f"httptools and the upstream client alone); its own work (parsing, admission, routing, recording, metrics) "
            f"is the other {gateway[0] - floor[0]:.2f} ms."]  # fmt: skip


def write_report(document: dict[str, Any], path: Path, command: str, doc: str) -> Path:
    ttfp, cpu = ttfp_table(document), cpu_table(document)
    names = [w["name"] for w in document["workloads"]]
    full = [w for w in document["workloads"] if not w["short"]]
    top = max(full, key=lambda w: w["concurrency"])["name"]
    short = next((w["name"] for w in document["workloads"] if w["short"]), None)
    lines = [
        "# Gateway overhead", "",
        f"Reproduce: `higgs-gateway bench {command}` (or `scripts/bench_overhead.sh`).", "",
        doc.split("\n\n", 1)[1].strip(), "",
        f"Setup: one emulated high-throughput worker (`--warm`) at time scale {document['time_scale']:g}; "
        f"{document['rounds']} interleaved rounds per path and workload; load generator aiohttp on uvloop; "
        f"{document['machine']} VM. Workloads: `cN` = the full text mix (16 s of audio per request on "
        "average, ~17 chunks) at concurrency N; `-short` = clips of a few words (2-3 s of audio, three "
        "chunks), the shape of the reference relay measurement.", "",
        "## Added time to first packet (wall clock, ms)", "",
        "| workload | path | TTFP p50 | TTFP p99 | added p50 | added p99 | direct's p50 spread across rounds | max load average |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for name in names:
        for path_name, row in ttfp[name].items():
            lines.append(
                f"| {name} | {path_name} | {_f(row['p50'])} | {_f(row['p99'])} | {_f(row['added_p50'], 2, True)} | "
                f"{_f(row['added_p99'], 2, True)} | {_f(row.get('spread_p50'))} | {_f(row.get('load'))} |"
            )
    lines += [
        "", "## Proxy CPU time (idle-corrected, pooled over rounds)", "",
        "| workload | path | CPU per request (ms) | CPU per audio second (ms) | raw, idle included (ms/request) | core busy | busy CPU (10 ms ticks) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]  # fmt: skip
    for name in names:
        for path_name, row in cpu[name].items():
            lines.append(
                f"| {name} | {path_name} | {row['per_request_ms']:.2f} | {row['per_audio_s_ms']:.3f} | "
                f"{row['raw_per_request_ms']:.2f} | {100 * row['core_busy']:.0f}% | {row['busy_ticks']:.0f}"
                f"{' (too few to resolve)' if row['busy_ticks'] < MIN_TICKS else ''} |"
            )
    if short:
        lines += ["", f"Split of the CPU cost (from `{top}` and `{short}`):", "",
                  "| path | fixed per request (ms) | per audio second relayed (ms) |", "|---|---:|---:|"]  # fmt: skip
        splits = {path_name: split_cost(cpu[top][path_name], cpu[short][path_name]) for path_name in cpu[top]}
        for path_name, split in splits.items():
            if split:
                lines.append(f"| {path_name} | {split[0]:.2f} | {split[1]:.3f} |")
        lines += _above_floor(splits)
    gateway_ttfp, gateway_cpu = ttfp[top].get("gateway", {}), cpu[top].get("gateway", {})
    measured = {
        "added TTFP p50 (ms)": gateway_ttfp.get("added_p50"),
        "added TTFP p99 (ms)": gateway_ttfp.get("added_p99"),
        "CPU per request (ms)": gateway_cpu.get("per_request_ms"),
    }
    lines += ["", f"## Against the targets (`{top}`)", "", "| measure | target | gateway | met |", "|---|---:|---:|---|"]
    for key, target in TARGETS.items():
        value = measured[key]
        met = "–" if value is None else ("yes" if value < target else "**no**")
        lines.append(f"| {key} | < {target:g} | {_f(value, 2)} | {met} |")
    if short and "gateway" in cpu[short]:
        value = cpu[short]["gateway"]["per_request_ms"]
        lines.append(f"| CPU per request, short clips (ms) | < 1 | {value:.2f} | {'yes' if value < 1 else '**no**'} |")
    if "nginx" not in document["runs"]:
        lines += ["", "nginx was not installed, so the reference rows are missing (Debian: `apt-get install nginx`)."]
    path.write_text("\n".join(lines) + "\n")
    return path
