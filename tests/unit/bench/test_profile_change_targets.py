"""The profile-change targets on hand-made documents: what passes, what is missed, and how."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.bench.profile_changes import evaluate, failed_requests, targets_table


def sweep(*ttfp_p50_s: float) -> dict[str, Any]:
    return {"phases": [{"concurrency": level, "ttfp_s": {"median": value, "p99": value * 2}}
                       for level, value in enumerate(ttfp_p50_s, 1)]}  # fmt: skip


def document(*, ht: int = 2, audio: float = 98.0, ll: int = 1, ttfp: tuple[float, ...] = (0.25, 0.26),
             during: int = 0, failed: int = 0) -> dict[str, Any]:  # fmt: skip
    return {
        "references": {
            "ht+ht": {"window": {"audio_s_per_s": 100.0}, "requests": {"sent": 10, "failed": 0}},
            "adaptive": {"sweep": sweep(0.25, 0.25), "requests": {"sent": 10, "failed": 0}},
        },
        "changing": {
            "to_ht": {"routable": {"low_latency": 2 - ht, "high_throughput": ht}},
            "window": {"audio_s_per_s": audio, "after_change": ht == 2},
            "back": {"routable": {"low_latency": ll, "high_throughput": 2 - ll}},
            "sweep": sweep(*ttfp),
            "requests": {"sent": 30, "failed": failed, "during_changes": {"sent": 5, "failed": during}},
        },
    }


def judged(doc: dict[str, Any]) -> dict[str, bool | None]:
    return {t.name: t.passed for t in evaluate(doc)}


def test_a_run_that_changed_both_ways_without_failures_meets_every_target() -> None:
    targets = evaluate(document())
    assert [t.name for t in targets] == [
        "sustained c64: high-throughput workers",
        "c64 audio-s/s after the change vs ht+ht",
        "low load: low-latency workers back",
        "c1 TTFP p50 (ms) after the change back vs adaptive",
        "c2 TTFP p50 (ms) after the change back vs adaptive",
        "failed requests during the changes",
        "failed requests, whole run (every fleet)",
    ]
    assert all(t.passed for t in targets)
    audio = targets[1]
    assert (audio.value, audio.reference, audio.bound) == (98.0, 100.0, pytest.approx(97.0))
    c2 = targets[4]
    assert (c2.value, c2.reference, c2.bound) == (pytest.approx(260.0), pytest.approx(250.0), pytest.approx(275.0))


def test_each_shortfall_misses_its_own_target_with_the_number() -> None:
    assert not judged(document(audio=96.9))["c64 audio-s/s after the change vs ht+ht"]
    assert not judged(document(ht=1))["sustained c64: high-throughput workers"]
    assert not judged(document(ll=0))["low load: low-latency workers back"]
    slow = judged(document(ttfp=(0.25, 0.28)))  # 12% over the reference's 250 ms
    assert slow["c1 TTFP p50 (ms) after the change back vs adaptive"]
    assert not slow["c2 TTFP p50 (ms) after the change back vs adaptive"]
    broken = judged(document(during=1, failed=1))
    assert not broken["failed requests during the changes"] and not broken["failed requests, whole run (every fleet)"]


def test_failures_anywhere_in_the_run_count_and_a_level_without_audio_misses() -> None:
    doc = document()
    doc["references"]["ht+ht"]["requests"]["failed"] = 2
    assert failed_requests(doc) == 2
    assert not judged(doc)["failed requests, whole run (every fleet)"]
    doc = document()
    doc["changing"]["sweep"]["phases"][0]["ttfp_s"]["median"] = None  # nothing came back at c1
    (c1,) = [t for t in evaluate(doc) if t.name.startswith("c1 ")]
    assert c1.passed is False
    assert "| c1 TTFP p50 (ms) after the change back vs adaptive | none |" in "\n".join(targets_table(evaluate(doc)))


def test_the_table_counts_what_was_met() -> None:
    lines = targets_table(evaluate(document(audio=50.0)))
    assert lines[0].startswith("6 of 7 met")
    assert "| c64 audio-s/s after the change vs ht+ht | 50 | 100 | >= 97% of | 97 | **no** |" in lines
