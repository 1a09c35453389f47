"""Turn a phase's raw requests into the figures reports show, overall and per SLA class.

``time_scale`` converts emulated runs back to modelled (H200-equivalent) units: an
emulator at time scale F runs F times faster than the modelled GPU, so times and RTF are
divided by F and audio throughput multiplied by F. Audio durations are never scaled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from gateway.bench.client import RequestResult
from gateway.bench.runner import PhaseResult
from gateway.bench.stats import Summary, throughput

NO_CLASS = "none"  # requests sent without an x-sla-class header
NO_POOL = "none"  # responses without an x-gateway-pool header (e.g. a worker direct)


def _summary(values: Sequence[float], factor: float) -> dict[str, float | int | None]:
    return asdict(Summary.of(values).scaled(factor))


def summarize_requests(results: Sequence[RequestResult], wall_s: float, time_scale: float = 1.0) -> dict[str, Any]:
    """Counts, error and pool breakdowns and metric summaries of one group of requests."""
    if time_scale <= 0:
        raise ValueError("time_scale must be positive")
    to_model = 1.0 / time_scale
    ok = [r for r in results if r.ok]
    total_audio = sum(r.audio_s for r in ok)
    wall_model = wall_s * to_model
    return {
        "sent": len(results),
        "ok": len(ok),
        "errors": dict(sorted(Counter(r.error for r in results if r.error).items())),
        "pools": dict(sorted(Counter(r.pool or NO_POOL for r in ok).items())),
        "audio_s": total_audio,
        "wall_s": wall_model,
        "audio_s_per_s": throughput(total_audio, wall_model),
        "requests_per_s": len(ok) / wall_model if wall_model > 0 else 0.0,
        "ttfp_s": _summary([r.ttfp_s for r in ok if r.ttfp_s is not None], to_model),
        "rtf": _summary([r.rtf for r in ok if r.rtf is not None], to_model),
        "e2e_s": _summary([r.e2e_s for r in ok if r.e2e_s is not None], to_model),
        "underrun_s": _summary([r.underrun_s for r in ok if r.underrun_s is not None], to_model),
    }


def summarize_phase(phase: PhaseResult, time_scale: float = 1.0) -> dict[str, Any]:
    """The phase overall plus one breakdown per SLA class present."""
    by_class: dict[str, list[RequestResult]] = {}
    for result in phase.results:
        by_class.setdefault(result.sla_class or NO_CLASS, []).append(result)
    summary = {
        "name": phase.name,
        "mode": phase.mode,
        "concurrency": phase.concurrency,
        "offered_rate": None if phase.offered_rate is None else phase.offered_rate * time_scale,
        "client_cpu_s": phase.client_cpu_s,
        "client_cpu_ms_per_request": 1000 * phase.client_cpu_s / len(phase.results) if phase.results else None,
        "loadavg_1m": phase.loadavg_1m,
        **summarize_requests(phase.results, phase.wall_s, time_scale),
    }
    # Per class is only interesting when classes are mixed (or a class header was sent).
    if set(by_class) != {NO_CLASS}:
        summary["by_class"] = {
            name: summarize_requests(group, phase.wall_s, time_scale) for name, group in sorted(by_class.items())
        }
    return summary
