"""Counts one stream's PCM and samples its decode pace, for ``StreamObservation.pace``.

A worker streams raw PCM: ``BYTES_PER_FRAME`` bytes per 40 ms codec frame, one frame per
decode step. Reads may split or merge the worker's chunks; counting frames from
cumulative bytes makes that irrelevant. Its cost on the hot path: two integer operations
per chunk, one clock read per second of audio.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.types.codec import BYTES_PER_FRAME, FRAMES_PER_SECOND
from gateway.types.observations import PaceSample


class PaceMeter:
    """Counts one stream's PCM and samples its decode pace every second of audio."""

    __slots__ = ("_clock", "_load", "_bytes", "_mark_at", "_mark_frames", "_mark_load", "samples", "first_at")

    def __init__(self, clock: Callable[[], float], load: Callable[[], int]) -> None:
        self._clock = clock
        self._load = load  # the worker's current load: what the pace is measured at
        self._bytes = 0
        self._mark_at = 0.0
        self._mark_frames = 0
        self._mark_load = 0
        self.samples: list[PaceSample] = []
        self.first_at: float | None = None

    def add(self, size: int) -> None:
        self._bytes += size
        frames = self._bytes // BYTES_PER_FRAME
        if self.first_at is None:
            if not size:
                return
            now = self._clock()
            self.first_at = now
            self._mark_at, self._mark_frames, self._mark_load = now, frames, self._load()
        elif frames - self._mark_frames >= FRAMES_PER_SECOND:
            now, load = self._clock(), self._load()
            # Tagged with the load half-way: it may have changed during the second.
            self.samples.append(PaceSample((self._mark_load + load + 1) // 2, frames - self._mark_frames, now - self._mark_at))
            self._mark_at, self._mark_frames, self._mark_load = now, frames, load

    @property
    def bytes(self) -> int:
        return self._bytes
