"""The routing targets, checked on a set of result documents (benchmark or simulator).

``adaptive`` (one low-latency + one high-throughput worker) against the static two-worker
fleets ``ht+ht`` and ``ll+ll`` on the same sweep and the same trace. Each row says what
was measured, what it is held to, and whether it passed; a target is never dropped from
the table because it was missed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

ADAPTIVE, HT, LL = "adaptive", "ht+ht", "ll+ll"


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    value: float
    reference: float
    relation: str  # how value must compare with the bound, for the table
    bound: float
    passed: bool


def _sweep_phases(documents: Sequence[dict[str, Any]], label: str) -> dict[int, dict[str, Any]]:
    for document in documents:
        if document["label"] == label and document["mode"] == "sweep":
            return {phase["concurrency"]: phase for phase in document["phases"]}
    return {}


def _trace_phase(documents: Sequence[dict[str, Any]], label: str, kind: str = "bursty") -> dict[str, Any] | None:
    for document in documents:
        if document["label"] == label and document["mode"] == "trace" and document["params"].get("kind") == kind:
            return document["phases"][0]
    return None


def _at_least(name: str, value: float, reference: float, share: float) -> Target:
    bound = reference * share
    return Target(name, value, reference, f">= {share:.0%} of", bound, value >= bound)


def _at_most(name: str, value: float, reference: float, share: float) -> Target:
    bound = reference * share
    return Target(name, value, reference, f"<= {share:.0%} of", bound, value <= bound)


def evaluate(documents: Sequence[dict[str, Any]]) -> list[Target]:
    adaptive, ht, ll = (_sweep_phases(documents, label) for label in (ADAPTIVE, HT, LL))
    targets: list[Target] = []
    rate: Callable[[dict[str, Any]], float] = lambda phase: phase["audio_s_per_s"]  # noqa: E731
    for level, phase in sorted(adaptive.items()):
        if level not in ht or level not in ll:
            continue
        best_static = max(rate(ht[level]), rate(ll[level]))
        if level == 1 or 8 <= level <= 32:
            targets.append(_at_least(f"c{level} audio-s/s vs best static", rate(phase), best_static, 0.95))
        elif 2 <= level <= 4:
            targets.append(_at_least(f"c{level} audio-s/s vs ll+ll", rate(phase), rate(ll[level]), 0.88))
        elif level >= 64:
            targets.append(_at_least(f"c{level} audio-s/s vs ht+ht", rate(phase), rate(ht[level]), 0.90))
        if level <= 4:
            targets.append(_at_most(f"c{level} RTF mean vs ll+ll", phase["rtf"]["mean"], ll[level]["rtf"]["mean"], 1.10))
            best_ttfp = min(ht[level]["ttfp_s"]["median"], ll[level]["ttfp_s"]["median"])
            targets.append(_at_most(f"c{level} TTFP median vs best static", phase["ttfp_s"]["median"], best_ttfp, 1.05))
        if level >= 64:
            p99 = phase["rtf"]["p99"]
            targets.append(Target(f"c{level} RTF p99", p99, 1.0, "<", 1.0, p99 < 1.0))
    mine, theirs = _trace_phase(documents, ADAPTIVE), _trace_phase(documents, HT)
    if mine is not None and theirs is not None:
        errors = sum(mine["errors"].values())
        targets.append(Target("bursty: errors", errors, 0, "=", 0, errors == 0))
        targets.append(_at_least("bursty: total audio-s/s vs ht+ht", rate(mine), rate(theirs), 0.95))
        mine_c, theirs_c = mine.get("by_class", {}), theirs.get("by_class", {})
        if "latency" in mine_c and "latency" in theirs_c:
            a, b = mine_c["latency"], theirs_c["latency"]
            targets.append(_at_most("bursty: latency RTF mean vs ht+ht", a["rtf"]["mean"], b["rtf"]["mean"], 0.85))
            targets.append(_at_most("bursty: latency TTFP p99 vs ht+ht", a["ttfp_s"]["p99"], b["ttfp_s"]["p99"], 1.10))
        if "throughput" in mine_c and "throughput" in theirs_c:
            a, b = mine_c["throughput"], theirs_c["throughput"]
            targets.append(_at_least("bursty: throughput audio-s/s vs ht+ht", rate(a), rate(b), 0.90))
    return targets


def targets_table(documents: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown lines (empty when the documents lack adaptive or the static fleets)."""
    targets = evaluate(documents)
    if not targets:
        return []
    passed = sum(t.passed for t in targets)
    lines = [
        "## Targets",
        "",
        f"{passed} of {len(targets)} met. `adaptive` against the static two-worker fleets on the same requests.",
        "",
        "| target | adaptive | reference | must be | bound | met |",
        "|---|---:|---:|---|---:|:---:|",
    ]
    for t in targets:
        lines.append(f"| {t.name} | {_fmt(t.value)} | {_fmt(t.reference)} | {t.relation} | {_fmt(t.bound)} | "
                     f"{'yes' if t.passed else '**no**'} |")  # fmt: skip
    return [*lines, ""]


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
