"""Filters: which workers may take a request (the first stage of every routing decision).

Each filter keeps a subset of the candidates, in one pass. The rules a class is made of
(its pool, the hard cap, its RTF ceiling, the latency reserve, the workers a retry already
tried) are each written once, here; the class modules in ``routing.classes`` only choose
which to apply and with what numbers.

A filter that removes a candidate *only* because of a rule another class benefits from
(the latency reserve) names the wait reason admission shows when nothing else is left.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from gateway.types import PoolName, reasons
from gateway.types.view import WorkerLoad

LL = PoolName.LOW_LATENCY

Workers = Sequence[WorkerLoad]


class Filter:
    """Keeps the workers that pass; ``wait_reason``: why a request waits if this filter emptied the list."""

    __slots__ = ()
    wait_reason: str | None = None

    def keep(self, workers: Workers) -> Workers:
        raise NotImplementedError


class Untried(Filter):
    """A retry never goes back to a worker that already failed it."""

    __slots__ = ("tried",)

    def __init__(self, tried: Set[str]) -> None:
        self.tried = tried

    def keep(self, workers: Workers) -> Workers:
        tried = self.tried
        return [w for w in workers if w.worker_id not in tried] if tried else workers


class Routable(Filter):
    """Ready workers only (starting, draining, ejected and failed ones take nothing new)."""

    __slots__ = ()

    def keep(self, workers: Workers) -> Workers:
        return [w for w in workers if w.routable]


class Predictable(Filter):
    """Ready workers with a curve: a predicting policy cannot place a request on the others."""

    __slots__ = ()

    def keep(self, workers: Workers) -> Workers:
        return [w for w in workers if w.routable and w.curve is not None]


class InPool(Filter):
    __slots__ = ("pool",)

    def __init__(self, pool: PoolName) -> None:
        self.pool = pool

    def keep(self, workers: Workers) -> Workers:
        pool = self.pool
        return [w for w in workers if w.pool is pool]


class WithinCap(Filter):
    """The hard cap (``WorkerLoad.cap``: the operator's slots, never past ``max_num_seqs``)."""

    __slots__ = ()

    def keep(self, workers: Workers) -> Workers:
        return [w for w in workers if w.load < w.cap]


class FreeSlot(Filter):
    """Slot-counting policies (the baselines, `rules`): fewer requests than ``slots``."""

    __slots__ = ()

    def keep(self, workers: Workers) -> Workers:
        return [w for w in workers if w.load < w.slots]


class UnderRtfCeiling(Filter):
    """Every stream on the worker stays at or under ``ceiling`` with this one added; an
    idle worker always has room (one stream is as fast as the worker gets)."""

    __slots__ = ("ceiling",)

    def __init__(self, ceiling: float) -> None:
        self.ceiling = ceiling

    def keep(self, workers: Workers) -> Workers:
        ceiling = self.ceiling
        return [w for w in workers if not w.load or w.curve.rtf_s[w.load] <= ceiling]  # type: ignore[union-attr]


class LeavesLatencyReserve(Filter):
    """On a low-latency worker, leave ``places`` free below its latency-grade capacity:
    the load at which its streams still run at ``latency_rtf`` (infinite: the hard cap).

    Curves are monotone, so "this request plus ``places`` more stay latency-grade" is one
    index: ``rtf_s[load + places]`` is the RTF at ``load + 1 + places`` requests.
    """

    __slots__ = ("places", "latency_rtf")
    wait_reason = reasons.QUEUED_LL_RESERVED

    def __init__(self, places: int, latency_rtf: float = float("inf")) -> None:
        self.places = places
        self.latency_rtf = latency_rtf

    def keep(self, workers: Workers) -> Workers:
        places, ceiling = self.places, self.latency_rtf
        if not places:
            return workers
        return [
            w for w in workers
            if w.pool is not LL or (w.load + places < w.cap and w.curve.rtf_s[w.load + places] <= ceiling)  # type: ignore[union-attr]
        ]  # fmt: skip


class MeetsDeadline(Filter):
    """A voice session's later sentence: its first audio is predicted before ``deadline_s``
    and its stream keeps up with real-time playback (RTF at most 1 with it added), so a
    player that reaches it hears no gap."""

    __slots__ = ("deadline_s",)

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s

    def keep(self, workers: Workers) -> Workers:
        deadline = self.deadline_s
        return [w for w in workers if w.curve.ttfp_s[w.load] <= deadline and w.curve.rtf_s[w.load] <= 1.0]  # type: ignore[union-attr]


ROUTABLE = Routable()
PREDICTABLE = Predictable()
WITHIN_CAP = WithinCap()
FREE_SLOT = FreeSlot()
