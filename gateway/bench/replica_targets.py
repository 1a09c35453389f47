"""The replica targets: K gateways on one Redis, behind round robin, route as one gateway.

``adaptive-2r`` and ``adaptive-3r`` against ``adaptive`` (the same fleet, one gateway) on
the same sweep and the same bursty trace: throughput at every level within 3%, the bursty
``latency`` class's TTFP p99 within 10% and its RTF mean within 5%, and c64's RTF p99 under
real time. Judged only when every document comes from one run, as the policy's targets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gateway.bench.targets import ADAPTIVE, Target, runs_table, same_run

REPLICAS = ("adaptive-2r", "adaptive-3r")


def _document(documents: Sequence[dict[str, Any]], label: str, mode: str) -> dict[str, Any] | None:
    return next((d for d in documents if d["label"] == label and d["mode"] == mode
                 and (mode == "sweep" or d["params"].get("kind") == "bursty")), None)  # fmt: skip


def _levels(document: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    return {} if document is None else {phase["concurrency"]: phase for phase in document["phases"]}


def _bounded(name: str, value: float, reference: float, relation: str, share: float) -> Target:
    bound = reference * share
    passed = value >= bound if relation == ">=" else value <= bound
    return Target(name, value, reference, f"{relation} {share:.0%} of", bound, passed)


def evaluate(documents: Sequence[dict[str, Any]]) -> tuple[list[Target], list[dict[str, Any]]]:
    """Every replica target and the documents it read; "not comparable" unless one run."""
    single_sweep, single_trace = _document(documents, ADAPTIVE, "sweep"), _document(documents, ADAPTIVE, "trace")
    single = _levels(single_sweep)
    targets: list[Target] = []
    used = [d for d in (single_sweep, single_trace) if d is not None]
    for label in REPLICAS:
        sweep, trace = _document(documents, label, "sweep"), _document(documents, label, "trace")
        used += [d for d in (sweep, trace) if d is not None]
        levels = _levels(sweep)
        for level, phase in sorted(levels.items()):
            if level in single:
                targets.append(_bounded(f"{label}: c{level} audio-s/s", phase["audio_s_per_s"],
                                        single[level]["audio_s_per_s"], ">=", 0.97))  # fmt: skip
        if levels:
            top = max(levels)
            p99 = levels[top]["rtf"]["p99"]
            targets.append(Target(f"{label}: c{top} RTF p99", p99, 1.0, "<", 1.0, p99 < 1.0))
        mine = (trace or {}).get("phases", [{}])[0].get("by_class", {}).get("latency")
        theirs = (single_trace or {}).get("phases", [{}])[0].get("by_class", {}).get("latency")
        if mine and theirs:
            targets.append(_bounded(f"{label}: bursty latency TTFP p99", mine["ttfp_s"]["p99"],
                                    theirs["ttfp_s"]["p99"], "<=", 1.10))  # fmt: skip
            targets.append(_bounded(f"{label}: bursty latency RTF mean", mine["rtf"]["mean"],
                                    theirs["rtf"]["mean"], "<=", 1.05))  # fmt: skip
    if not same_run(used):
        targets = [replace(t, passed=None) for t in targets]
    return targets, used


def table(documents: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown lines (empty without adaptive and a replica setup)."""
    targets, used = evaluate(documents)
    if not targets:
        return []
    comparable = all(t.passed is not None for t in targets)
    summary = (f"{sum(bool(t.passed) for t in targets)} of {len(targets)} met, every setup measured in the same run."
               if comparable else "**Not comparable**: measured in different runs (or without a run id).")  # fmt: skip
    lines = [
        "## Replica targets",
        "",
        f"{summary} Several gateway replicas on one Redis, behind nginx round robin, against "
        "`adaptive` (the same fleet, one gateway).",
        "",
        "| target | replicas | one gateway | must be | bound | met |",
        "|---|---:|---:|---|---:|:---:|",
    ]
    for t in targets:
        met = "not comparable" if t.passed is None else "yes" if t.passed else "**no**"
        lines.append(f"| {t.name} | {_fmt(t.value)} | {_fmt(t.reference)} | {t.relation} | {_fmt(t.bound)} | {met} |")
    if not comparable:
        lines += ["", *runs_table(used)]
    return [*lines, ""]


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
