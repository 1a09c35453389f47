"""The overhead report: pure arithmetic over the runs ``bench overhead`` recorded.

Added TTFP is the mean over rounds of (proxy - direct) in the same round, so slow drift
of the shared machine cancels; the spread of direct's own rounds is printed beside it as
the noise floor. CPU is pooled over rounds (sum of busy CPU / sum of requests) because
the kernel counts CPU in 10 ms ticks, too coarse for one short phase.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

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
        for path_name in cpu[top]:
            split = split_cost(cpu[top][path_name], cpu[short][path_name])
            if split:
                lines.append(f"| {path_name} | {split[0]:.2f} | {split[1]:.3f} |")
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
