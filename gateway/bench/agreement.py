"""How closely the fleet simulator agrees with the HTTP benchmark on the same scenarios.

    python -m gateway.bench.agreement docs/benchmarks/comparison docs/benchmarks/simulator

Both folders hold result documents of the same setups, seeds and traces (``bench compare``
and ``simulate`` write the same format). For every sweep level and trace this prints the
figures side by side with the simulator's relative difference. The simulator leaves out
HTTP, so its TTFP lacks the gateway's and the client's few milliseconds per request, and
its c64 load generator never runs short of CPU.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from gateway.bench import report

FIGURES = (("audio-s/s", "audio_s_per_s", None, 1.0), ("RTF mean", "rtf", "mean", 1.0),
           ("TTFP p50 (ms)", "ttfp_s", "median", 1000.0))  # fmt: skip


def _load(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    documents = {}
    for path in sorted(folder.glob("*.json")):
        document = report.load(path)
        kind = "sweep" if document["mode"] == "sweep" else document["params"].get("kind", "trace")
        documents[(document["label"], kind)] = document
    return documents


def _value(phase: dict[str, Any], key: str, stat: str | None, scale: float) -> float | None:
    value = phase[key] if stat is None else phase[key][stat]
    return None if value is None else value * scale


def rows(http: Path, sim: Path) -> tuple[list[str], list[float]]:
    measured, simulated = _load(http), _load(sim)
    lines = [
        "| setup | run | " + " | ".join(f"{name} HTTP / sim (diff)" for name, *_ in FIGURES) + " |",
        "|---|---|" + "---:|" * len(FIGURES),
    ]
    throughput_diffs: list[float] = []
    for key in sorted(set(measured) & set(simulated)):
        label, kind = key
        pairs = zip(measured[key]["phases"], simulated[key]["phases"], strict=False)
        for a, b in pairs:
            cells = []
            for name, metric, stat, scale in FIGURES:
                x, y = _value(a, metric, stat, scale), _value(b, metric, stat, scale)
                if x is None or y is None or x == 0:
                    cells.append("–")
                    continue
                diff = (y - x) / x
                if name == "audio-s/s":
                    throughput_diffs.append(abs(diff))
                digits = 3 if name == "RTF mean" else 1 if name == "audio-s/s" else 0
                cells.append(f"{x:.{digits}f} / {y:.{digits}f} ({diff:+.1%})")
            run = a["name"] if kind == "sweep" else kind
            lines.append(f"| {label} | {run} | " + " | ".join(cells) + " |")
    return lines, throughput_diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.agreement", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("http", type=Path, help="bench compare's output folder")
    parser.add_argument("sim", type=Path, help="simulate's output folder")
    args = parser.parse_args(argv)
    lines, diffs = rows(args.http, args.sim)
    print("\n".join(lines))
    if diffs:
        print(f"\naudio-s/s: median |difference| {statistics.median(diffs):.1%}, largest {max(diffs):.1%} "
              f"over {len(diffs)} runs")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
