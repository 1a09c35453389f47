"""Clocks for the engine: model seconds, either scaled wall time or set by hand.

The engine reads time only through a ``Clock``, so unit tests drive it on a
``VirtualClock`` deterministically, with no sleeping, and the server runs it on a
``ScaledClock`` whose model seconds pass ``1 / time_scale`` times faster than wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Model seconds since an arbitrary origin; never goes backwards."""
        ...


class VirtualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def set(self, when: float) -> None:
        if when < self._now:
            raise ValueError(f"virtual clock cannot go back from {self._now} to {when}")
        self._now = when

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)


class ScaledClock:
    """Model time = wall time / ``time_scale`` (0.1: a modelled second takes 0.1 s)."""

    def __init__(self, time_scale: float, wall: Callable[[], float] = time.monotonic, origin: float | None = None) -> None:
        """``origin``: the wall time model time counts from (default: now)."""
        if time_scale <= 0:
            raise ValueError(f"time scale must be > 0, got {time_scale}")
        self.time_scale = time_scale
        self._wall = wall
        self._origin = wall() if origin is None else origin

    def now(self) -> float:
        return (self._wall() - self._origin) / self.time_scale

    def wall_delay(self, model_seconds: float) -> float:
        """Wall seconds until ``model_seconds`` of model time from now have passed."""
        return max(0.0, model_seconds * self.time_scale)
