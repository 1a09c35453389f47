"""The voice-session targets of the committed report, judged on one run's documents.

Every row says what was measured, what it is held to and whether it passed. As for the
routing targets, a comparison counts only when every setup it reads was measured in the
same run (``notes.run_id``); otherwise it is "not comparable". A target this benchmark does
not measure is listed as such rather than dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gateway.bench import session_abandon
from gateway.bench.session_summary import DEFAULT_GAP_TOLERANCE_S, capacity
from gateway.bench.targets import ADAPTIVE, HT, LL, Target, same_run

DIRECT = "direct"
SETUP_NAMES = (ADAPTIVE, LL, HT, DIRECT)
FEW_SESSIONS = (1, 2, 3, 4)
DIRECT_FIRST_AUDIO_SLACK_WALL_S = 0.010
BARGE_IN_LAST_BYTE_S = 0.100


def _document(documents: Sequence[dict[str, Any]], label: str) -> dict[str, Any] | None:
    return next((d for d in documents if d["label"] == label and d["mode"] == "sessions"), None)


def _levels(document: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    return {} if document is None else {phase["sessions"]: phase for phase in document["phases"]}


def evaluate(documents: Sequence[dict[str, Any]]) -> tuple[list[Target], list[str]]:
    """The targets, and the ones not measured by this benchmark (by name)."""
    found = [d for d in (_document(documents, name) for name in SETUP_NAMES) if d is not None]
    abandoned = session_abandon.evaluate(documents)
    targets = _evaluate(documents) + abandoned
    if not same_run(found):
        targets = [replace(t, passed=None) for t in targets]
    return targets, [] if abandoned else ["200 sessions opened and abandoned in every way: no leak, memory back"]


def _http_ttfp(document: dict[str, Any] | None, sessions: int) -> float | None:
    """The HTTP TTFP of the first sentences from as many clients as sessions; documents
    written before that was measured have the one-client figure only."""
    if document is None:
        return None
    by_sessions = document.get("http_first_sentence_ttfp_by_sessions") or {}
    if by_sessions:
        value: float | None = by_sessions.get(str(sessions))
        return value
    return document.get("http_first_sentence_ttfp_s") if sessions == 1 else None


def _evaluate(documents: Sequence[dict[str, Any]]) -> list[Target]:
    adaptive_doc, ll_doc = _document(documents, ADAPTIVE), _document(documents, LL)
    ht_doc, direct_doc = _document(documents, HT), _document(documents, DIRECT)
    if adaptive_doc is None:
        return []
    adaptive = _levels(adaptive_doc)
    targets: list[Target] = []
    for level in FEW_SESSIONS:
        phase = adaptive.get(level)
        if phase is None:
            continue
        sessions = f"{level} session{'s' if level > 1 else ''}"
        p50 = phase["first_audio_s"]["median"]
        http_ttfp = _http_ttfp(ll_doc, level)
        if http_ttfp is not None and p50 is not None:
            bound = http_ttfp * 1.10
            targets.append(Target(f"{sessions}: first audio p50 vs HTTP TTFP on ll+ll ({level} at once)", p50,
                                  http_ttfp, "<= 110% of", bound, p50 <= bound))  # fmt: skip
        gaps = phase["gaps_over_tolerance"]
        targets.append(Target(f"{sessions}: gaps", gaps, 0, "=", 0, gaps == 0 and phase["errors"] == 0))
    direct = _levels(direct_doc).get(1)
    if 1 in adaptive and direct is not None:
        mine, theirs = adaptive[1]["largest_gap_s"], direct["largest_gap_s"]
        # Silences within the tolerance are a player's jitter, not gaps: equal up to it.
        bound = theirs + adaptive_doc.get("params", {}).get("gap_tolerance_s", DEFAULT_GAP_TOLERANCE_S)
        targets.append(Target("1 session: largest gap vs direct", mine, theirs, "<= (+ tolerance)", bound,
                              mine <= bound))  # fmt: skip
        a, b = adaptive[1]["first_audio_s"]["median"], direct["first_audio_s"]["median"]
        if a is not None and b is not None:
            bound = b + DIRECT_FIRST_AUDIO_SLACK_WALL_S / adaptive_doc["time_scale"]
            targets.append(Target("1 session: first audio p50 vs direct", a, b, "<= + 10 ms wall", bound, a <= bound))
    mine_cap = capacity(adaptive_doc["phases"])
    for doc, share, name in ((ll_doc, 1.5, LL), (ht_doc, 0.9, HT)):
        if doc is not None:
            theirs_cap = capacity(doc["phases"])
            bound = theirs_cap * share
            # Capacity 0 on both sides is no evidence of anything: it is missed, not met.
            ok = mine_cap >= bound and mine_cap > 0
            targets.append(Target(f"capacity (sessions) vs {name}", mine_cap, theirs_cap, f">= {share:.0%} of", bound, ok))
    barge = adaptive_doc.get("barge_in")
    if adaptive_doc.get("barge_in_error"):  # it did not complete: both rows missed
        never = float("nan")
        targets.append(Target("barge-in: cancel to last audio byte", never, BARGE_IN_LAST_BYTE_S, "<=",
                              BARGE_IN_LAST_BYTE_S, False))  # fmt: skip
        targets.append(Target("barge-in: cancel to every worker slot freed", never, 0, "freed", 0, False))
    elif barge is not None:
        last = barge["last_byte_s"]
        targets.append(Target("barge-in: cancel to last audio byte", last, BARGE_IN_LAST_BYTE_S, "<=",
                              BARGE_IN_LAST_BYTE_S, last <= BARGE_IN_LAST_BYTE_S))  # fmt: skip
        freed = barge["slot_freed_s"]
        targets.append(Target("barge-in: cancel to every worker slot freed", float("nan") if freed is None else freed,
                              0, "freed", 0, freed is not None))  # fmt: skip
    return targets


def _fmt(value: float) -> str:
    if value != value:  # NaN: never happened
        return "never"
    return f"{value:.3f}" if abs(value) < 100 and value != int(value) else f"{value:g}"


def targets_table(documents: Sequence[dict[str, Any]]) -> list[str]:
    """Markdown lines: every target with met / missed / not comparable."""
    targets, unmeasured = evaluate(documents)
    if not targets:
        return []
    if all(t.passed is not None for t in targets):
        summary = (f"{sum(bool(t.passed) for t in targets)} of {len(targets)} met; every setup measured in the "
                   "same run. Times in modelled seconds.")  # fmt: skip
    else:
        summary = ("**Not comparable**: the setups were measured in different runs (or carry no run id), so no "
                   "target is judged. Re-run them together.")  # fmt: skip
    lines = ["## Targets", "", summary, "", "| target | adaptive | reference | must be | bound | met |",
             "|---|---:|---:|---|---:|:---:|"]  # fmt: skip
    for t in targets:
        met = "not comparable" if t.passed is None else "yes" if t.passed else "**no**"
        lines.append(f"| {t.name} | {_fmt(t.value)} | {_fmt(t.reference)} | {t.relation} | {_fmt(t.bound)} | {met} |")
    lines += [f"| {name} | – | – | – | – | not measured by `bench sessions` |" for name in unmeasured]
    return [*lines, ""]
