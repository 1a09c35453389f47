"""A phase's raw requests turned into the figures reports show: overall, per SLA class, over time.

``summarize_phase``: the totals of one level or trace. ``timeline``: a trace window by
window (throughput, TTFP p99 per class, each pool's share): the ramp trace is judged by how
the policy follows load up and down, which totals hide. ``delivered_audio_s`` and friends:
audio delivered over one run's clock, counting each chunk when it arrived (not each request
when it ended), so a sustained run's measurement window counts exactly what it delivered
whatever was in flight at its edges.

``time_scale`` converts emulated runs back to modelled (H200-equivalent) units: an
emulator at time scale F runs F times faster than the modelled GPU, so times and RTF are
divided by F and audio throughput multiplied by F. Audio durations are never scaled.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gateway.bench.client import RequestResult
from gateway.bench.stats import Summary, audio_seconds, percentile, throughput

NO_CLASS = "none"  # requests sent without an x-sla-class header
NO_POOL = "none"  # responses without an x-gateway-pool header (e.g. a worker direct)


@dataclass(slots=True)
class PhaseResult:
    """Every request of one level (or one trace) and the wall time it took."""

    name: str
    mode: str  # "closed" or "open"
    concurrency: int | None  # closed loop only
    wall_s: float
    client_cpu_s: float  # the load generator's own CPU time: proof it was not the bottleneck
    results: list[RequestResult] = field(default_factory=list)
    offered_rate: float | None = None  # open loop: requests per second the trace offered
    loadavg_1m: float | None = None  # the machine's load at the end: was anything else running?
    started_at: float = 0.0  # the clock at the phase start (``sent_s`` counts from it)


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
        # Why each went where it went (pool: x-gateway-route-reason), to take a level apart later.
        "route_reasons": dict(sorted(Counter(f"{r.pool or NO_POOL}: {r.route_reason}" for r in ok if r.route_reason).items())),
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


# ---- a trace over time ----------------------------------------------------------------------
def timeline(results: Sequence[RequestResult], window_s: float, time_scale: float = 1.0) -> list[dict[str, Any]]:
    """One row per window: offered rate, delivered audio-s/s, TTFP p99 per class, pool shares."""
    if window_s <= 0:
        raise ValueError("window must be positive")
    to_model = 1.0 / time_scale
    sent: dict[int, list[RequestResult]] = defaultdict(list)
    delivered: Counter[int] = Counter()
    for result in results:
        sent[int(result.sent_s * to_model // window_s)].append(result)
        if result.ok and result.e2e_s is not None:
            done = (result.sent_s + result.e2e_s) * to_model
            delivered[int(done // window_s)] += result.audio_s
    last = max([*sent, *delivered], default=-1)
    rows = []
    for index in range(last + 1):
        group = sent.get(index, [])
        ok = [r for r in group if r.ok]
        by_class: dict[str, list[float]] = defaultdict(list)
        for r in ok:
            if r.ttfp_s is not None:
                by_class[r.sla_class or "none"].append(r.ttfp_s * to_model)
        pools = Counter(r.pool or "none" for r in ok)
        rows.append({
            "start_s": index * window_s,
            "sent": len(group),
            "errors": len(group) - len(ok),
            "audio_s_per_s": delivered[index] / window_s,
            "ttfp_p99_s": {name: percentile(values, 99) for name, values in sorted(by_class.items())},
            "pool_share": {name: count / len(ok) for name, count in sorted(pools.items())} if ok else {},
        })  # fmt: skip
    return rows


# ---- audio delivered over a run's clock -----------------------------------------------------
def on_run_clock(phase: PhaseResult, origin: float) -> list[RequestResult]:
    """The phase's requests with ``sent_s`` counted from ``origin`` (the run's start on the
    same clock as the phase's) instead of from the phase start. Changes them in place."""
    shift = phase.started_at - origin
    for result in phase.results:
        result.sent_s += shift
    return phase.results


def delivered_audio_s(results: Iterable[RequestResult], start_s: float, end_s: float) -> float:
    """Audio seconds whose chunks arrived within [start_s, end_s) (needs the chunks kept)."""
    pcm = 0
    for result in results:
        for offset, size in result.chunks:
            if start_s <= result.sent_s + offset < end_s:
                pcm += size
    return audio_seconds(pcm)


def audio_rate(results: Sequence[RequestResult], start_s: float, end_s: float, time_scale: float = 1.0) -> float:
    """Audio seconds per modelled second delivered within a wall window."""
    if end_s <= start_s:
        raise ValueError("the window must have a positive length")
    return delivered_audio_s(results, start_s, end_s) / ((end_s - start_s) / time_scale)


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def windows(results: Sequence[RequestResult], end_s: float, window_s: float, time_scale: float = 1.0) -> list[dict[str, Any]]:
    """One row per modelled window up to ``end_s`` (wall): audio-s/s delivered, the mean
    number of requests in flight (the load), requests sent and failed."""
    if window_s <= 0 or time_scale <= 0:
        raise ValueError("window and time scale must be positive")
    wall_window = window_s * time_scale
    count = max(1, int(-(-end_s // wall_window)))
    rows = []
    for index in range(count):
        start, stop = index * wall_window, (index + 1) * wall_window
        sent = [r for r in results if start <= r.sent_s < stop]
        busy = sum(_overlap(r.sent_s, r.sent_s + (r.e2e_s or 0.0), start, stop) for r in results)
        rows.append({
            "start_s": index * window_s,
            "audio_s_per_s": delivered_audio_s(results, start, stop) / window_s,
            "in_flight": busy / wall_window,
            "sent": len(sent),
            "errors": sum(1 for r in sent if not r.ok),
        })  # fmt: skip
    return rows


def failed_during(results: Iterable[RequestResult], spans: Sequence[tuple[float, float]]) -> tuple[int, int]:
    """Requests in flight at some time within one of ``spans`` (wall, run clock): (all, failed)."""
    total = failed = 0
    for result in results:
        done = result.sent_s + (result.e2e_s or 0.0)
        if any(_overlap(result.sent_s, done, a, b) > 0 or a <= result.sent_s <= b for a, b in spans):
            total += 1
            failed += 0 if result.ok else 1
    return total, failed
