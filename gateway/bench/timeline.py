"""A trace over time: throughput, TTFP p99 per class and each pool's share, window by window.

The ramp trace is judged by how the policy follows load up and down, which totals hide;
this cuts the trace into fixed windows (by when requests were sent, or finished for
throughput) so a plot can show it. Times in modelled seconds, like every report.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from gateway.bench.client import RequestResult
from gateway.bench.stats import percentile


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
