"""The profile-change targets, judged on one ``bench profile-changes`` document.

Every row says what was measured, what it is held to and whether it passed; a target is
never dropped because it was missed, and one whose measurement is missing (the fleet never
got there) is missed with the value 0. The references are measured in the same run (one
run id), so every row is comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.bench.targets import Target

HT_SHARE = 0.97  # of a static 2 x high-throughput fleet's c64 audio-s/s, after the changes
TTFP_P50_SLACK = 1.10  # low-load TTFP p50 after the change back, against the static adaptive fleet
LL, HT = "low_latency", "high_throughput"


def _levels(sweep: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    return {} if sweep is None else {phase["concurrency"]: phase for phase in sweep["phases"]}


def evaluate(document: dict[str, Any]) -> list[Target]:
    references, changing = document["references"], document["changing"]
    high = f"c{document.get('params', {}).get('concurrency', 64)}"
    targets: list[Target] = []
    ht_count = changing["to_ht"]["routable"].get(HT, 0)
    targets.append(Target(f"sustained {high}: high-throughput workers", ht_count, 2, ">=", 2, ht_count >= 2))
    mine = changing["window"]["audio_s_per_s"]
    theirs = references["ht+ht"]["window"]["audio_s_per_s"]
    bound = theirs * HT_SHARE
    targets.append(Target(f"{high} audio-s/s after the change vs ht+ht", mine, theirs, f">= {HT_SHARE:.0%} of", bound,
                          mine >= bound))  # fmt: skip
    ll_count = changing["back"]["routable"].get(LL, 0)
    targets.append(Target("low load: low-latency workers back", ll_count, 1, ">=", 1, ll_count >= 1))
    adaptive = _levels(references["adaptive"]["sweep"])
    for level, phase in sorted(_levels(changing.get("sweep")).items()):
        reference = adaptive.get(level)
        if reference is None or reference["ttfp_s"]["median"] is None:
            continue
        median = phase["ttfp_s"]["median"]
        value = float("inf") if median is None else median * 1000
        theirs = reference["ttfp_s"]["median"] * 1000
        bound = theirs * TTFP_P50_SLACK
        targets.append(Target(f"c{level} TTFP p50 (ms) after the change back vs adaptive", value, theirs,
                              f"<= {TTFP_P50_SLACK:.0%} of", bound, value <= bound))  # fmt: skip
    during = changing["requests"]["during_changes"]["failed"]
    targets.append(Target("failed requests during the changes", during, 0, "=", 0, during == 0))
    total = failed_requests(document)
    targets.append(Target("failed requests, whole run (every fleet)", total, 0, "=", 0, total == 0))
    return targets


def failed_requests(document: dict[str, Any]) -> int:
    parts = [*document["references"].values(), document["changing"]]
    return sum(part["requests"]["failed"] for part in parts)


def targets_table(targets: Sequence[Target]) -> list[str]:
    met = sum(bool(t.passed) for t in targets)
    lines = [
        f"{met} of {len(targets)} met; the references were measured in the same run.",
        "",
        "| target | changing fleet | reference | must be | bound | met |",
        "|---|---:|---:|---|---:|:---:|",
    ]
    for t in targets:
        lines.append(f"| {t.name} | {_fmt(t.value)} | {_fmt(t.reference)} | {t.relation} | {_fmt(t.bound)} | "
                     f"{'yes' if t.passed else '**no**'} |")  # fmt: skip
    return lines


def _fmt(value: float) -> str:
    if value == float("inf"):
        return "none"
    if float(value).is_integer() and abs(value) < 1000:
        return str(int(value))
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
