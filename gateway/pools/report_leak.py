"""Tell a worker's leaking load counter apart from other replicas' load.

A released worker's ``/load`` stays +1 for good when a client leaves before the handler
returns, or a raw stream fails after its 200. Without a fleet view, that excess passes for
other replicas' load and traffic drifts away from the worker until it restarts. With the
fleet's exact in-flight count known, the excess of a report over it is measured on every
report: lag (a release the worker has not counted yet) makes it come and go, a leak keeps
it up. The smallest excess over a window of reports is the leak, and it drops back to 0
with the first report that shows none (the worker restarted, or it was lag after all).
"""

from __future__ import annotations

from collections import deque

# A leak must show in every report for this long before the report is corrected: longer
# than any lag between a release and the worker's count of it.
LEAK_CONFIRM_S = 10.0


class LeakWatch:
    __slots__ = ("_samples",)

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()  # (time, report minus fleet count)

    def observe(self, now: float, excess: int) -> int:
        """Record one report's excess over the fleet's count; returns the leak learned (>= 0)."""
        samples = self._samples
        samples.append((now, excess))
        # Keep one sample at or before the window's start, so the window's span is known.
        while len(samples) > 1 and samples[1][0] <= now - LEAK_CONFIRM_S:
            samples.popleft()
        if samples[0][0] > now - LEAK_CONFIRM_S:
            return 0  # not watched for long enough yet
        return max(0, min(e for _, e in samples))
