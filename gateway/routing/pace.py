"""Turning one upstream stream's bytes into observations for the performance model.

A worker streams raw 24 kHz s16le PCM: 1920 bytes per 40 ms codec frame, and every codec
frame is one decode step of the worker. So the time a stream takes to deliver 25 more
frames (one second of audio) is 25 decode steps at whatever load the worker carried
meanwhile. Reads may split or merge the worker's chunks; counting frames from cumulative
bytes makes that irrelevant. Two integer operations per read on the hot path.
"""

from __future__ import annotations

from gateway.routing.performance import PaceSample, StreamObservation

PCM_BYTES_PER_FRAME = 1920
# Frames between two pace samples: the worker's steady chunk size (25 frames = 48000 bytes).
SAMPLE_FRAMES = 25


class PaceTracker:
    __slots__ = ("worker_id", "dispatch_load", "_sent_at", "_first_at", "_bytes", "_mark_at", "_mark_frames",
                 "_mark_load", "_samples")  # fmt: skip

    def __init__(self, worker_id: str, dispatch_load: int, sent_at: float) -> None:
        self.worker_id = worker_id
        self.dispatch_load = dispatch_load  # requests on the worker with this one
        self._sent_at = sent_at
        self._first_at: float | None = None
        self._bytes = 0
        self._mark_at = 0.0
        self._mark_frames = 0
        self._mark_load = dispatch_load
        self._samples: list[PaceSample] = []

    def on_bytes(self, now: float, nbytes: int, load: int) -> None:
        """``nbytes`` arrived at ``now`` while the worker carried ``load`` requests."""
        self._bytes += nbytes
        frames = self._bytes // PCM_BYTES_PER_FRAME
        if self._first_at is None:
            self._first_at = now
            self._mark_at, self._mark_frames, self._mark_load = now, frames, load
            return
        if frames - self._mark_frames >= SAMPLE_FRAMES:
            self._samples.append(
                PaceSample((self._mark_load + load + 1) // 2, frames - self._mark_frames, now - self._mark_at)
            )
            self._mark_at, self._mark_frames, self._mark_load = now, frames, load

    @property
    def ttfp_s(self) -> float | None:
        return None if self._first_at is None else self._first_at - self._sent_at

    def observation(self, clean_ttfp: bool = True) -> StreamObservation:
        """What a completed stream showed; ``clean_ttfp`` False drops the TTFP (e.g. a retry)."""
        return StreamObservation(
            self.worker_id, self.dispatch_load, self.ttfp_s if clean_ttfp else None, tuple(self._samples)
        )
