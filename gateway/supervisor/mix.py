"""When to move a GPU from one pool's deploy profile to the other's (pure: the clock is passed in).

The desired mix comes from whoever judges the traffic (the planner), through ``DesiredMix``.
A move is made only when the same move has been wanted, without a break, for the hold
time: a real worker is gone for minutes while it restarts under the other profile, so a
swing of the traffic shorter than that must not pay for one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.types import PoolName


class DesiredMix(Protocol):
    def mix_for(self, gpus: int) -> Mapping[str, int] | None:
        """Pool name -> how many workers it should have on a fleet of exactly ``gpus`` GPUs
        (fewer in all when the traffic needs fewer: the rest stays where it is); None: cannot
        judge (change nothing)."""


@dataclass(frozen=True)
class Move:
    source: PoolName
    target: PoolName


@dataclass(frozen=True)
class Pending:
    move: Move
    since: float  # clock time the move was first wanted (this time round)


class MoveDecider:
    """Turns desired and running counts into at most one move, once it has been held.

    ``running``: supervised workers per pool that are alive (starting, running or backing
    off); None when the fleet is not settled enough to judge (a worker starting). Only
    pools present in ``running`` can give or take a GPU.
    """

    def __init__(self, hold_s: float, min_workers: Mapping[PoolName, int]) -> None:
        self.hold_s = hold_s
        self._min = dict(min_workers)
        self.pending: Pending | None = None

    def decide(self, desired: Mapping[str, int] | None, running: Mapping[PoolName, int] | None, now: float) -> Move | None:
        wanted = self.wanted(desired, running)
        if wanted is None:
            self.pending = None
            return None
        if self.pending is None or self.pending.move != wanted:
            # A new direction (or the first time): the hold starts over.
            self.pending = Pending(wanted, now)
        return wanted if now - self.pending.since >= self.hold_s else None

    def reset(self) -> None:
        """After a move (made or called off): the next one must be held from the start."""
        self.pending = None

    def wanted(self, desired: Mapping[str, int] | None, running: Mapping[PoolName, int] | None) -> Move | None:
        """The move the counts ask for now, ignoring the hold; None when none (or no judgement)."""
        if desired is None or running is None or len(running) < 2:
            return None
        want: dict[PoolName, int] = {}
        for pool in running:
            count = desired.get(pool.value)
            if count is None or count < 0:
                return None  # a pool the judge says nothing about: it cannot judge this fleet
            want[pool] = count
        surplus = [pool for pool in running if running[pool] > want[pool]]
        deficit = [pool for pool in running if running[pool] < want[pool]]
        # Only a GPU one pool has too many of and the other too few: growing or shrinking
        # the whole fleet is the autoscaler's business, not a profile change.
        if len(surplus) != 1 or len(deficit) != 1:
            return None
        source, target = surplus[0], deficit[0]
        if running[source] - 1 < self._min.get(source, 0):
            return None
        return Move(source, target)
