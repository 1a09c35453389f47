"""The replica targets: K gateways against one on the same sweep and trace, judged only
when every document comes from one run."""

from __future__ import annotations

from typing import Any

from gateway.bench.targets import evaluate_replicas as evaluate, replicas_table as table
from gateway.bench.targets import ADAPTIVE, RUN_ID


def _stats(p99: float, mean: float = 0.3) -> dict[str, float]:
    return {"mean": mean, "median": mean, "p99": p99}


def _sweep(label: str, audio: dict[int, float], rtf_p99: float = 0.9, run: str = "r1") -> dict[str, Any]:
    phases = [{"concurrency": c, "audio_s_per_s": a, "rtf": _stats(rtf_p99), "ttfp_s": _stats(0.5)}
              for c, a in audio.items()]  # fmt: skip
    return {"label": label, "mode": "sweep", "params": {}, "notes": {RUN_ID: run}, "phases": phases}


def _trace(label: str, ttfp_p99: float, rtf_mean: float, run: str = "r1") -> dict[str, Any]:
    latency = {"ttfp_s": _stats(ttfp_p99), "rtf": _stats(0.9, rtf_mean), "audio_s_per_s": 5.0}
    return {"label": label, "mode": "trace", "params": {"kind": "bursty"}, "notes": {RUN_ID: run},
            "phases": [{"concurrency": None, "by_class": {"latency": latency}, "loadavg_1m": 1.0}]}  # fmt: skip


def _by_name(documents: list[dict[str, Any]]) -> dict[str, bool | None]:
    return {t.name: t.passed for t in evaluate(documents)[0]}


def test_every_target_of_every_replica_setup_against_the_single_gateway() -> None:
    documents = [
        _sweep(ADAPTIVE, {1: 4.0, 64: 80.0}), _trace(ADAPTIVE, 0.40, 0.35),
        _sweep("adaptive-2r", {1: 3.9, 64: 76.0}), _trace("adaptive-2r", 0.43, 0.36),
        _sweep("adaptive-3r", {1: 4.0, 64: 80.0}, rtf_p99=1.2), _trace("adaptive-3r", 0.50, 0.40),
    ]  # fmt: skip
    assert _by_name(documents) == {
        "adaptive-2r: c1 audio-s/s": True,  # 97.5% of one gateway's
        "adaptive-2r: c64 audio-s/s": False,  # 95%
        "adaptive-2r: c64 RTF p99": True,
        "adaptive-2r: bursty latency TTFP p99": True,  # 1.075x
        "adaptive-2r: bursty latency RTF mean": True,  # 1.03x
        "adaptive-3r: c1 audio-s/s": True,
        "adaptive-3r: c64 audio-s/s": True,
        "adaptive-3r: c64 RTF p99": False,
        "adaptive-3r: bursty latency TTFP p99": False,  # 1.25x
        "adaptive-3r: bursty latency RTF mean": False,  # 1.14x
    }
    assert table(documents)[2].startswith("6 of 10 met")


def test_documents_of_different_runs_are_not_judged() -> None:
    documents = [_sweep(ADAPTIVE, {1: 4.0}), _sweep("adaptive-2r", {1: 4.0}, run="r2")]
    assert set(_by_name(documents).values()) == {None}
    assert any("Not comparable" in line for line in table(documents))


def test_no_replica_setup_no_table() -> None:
    assert table([_sweep(ADAPTIVE, {1: 4.0})]) == []
