"""What one upstream stream showed: the data the performance model learns from.

One ``StreamObservation`` per attempt on a worker (a retried request yields one per
worker tried), handed to a ``StreamObserver`` when the attempt ends; the recorder passes
it on to the routing's performance model.

A worker streams raw 24 kHz s16le PCM: 1920 bytes per 40 ms codec frame, and every frame
is one decode step of the worker. So the time a stream takes to deliver 25 more frames
(one second of audio) is 25 decode steps at the load the worker carried meanwhile.
``PaceMeter`` turns the chunks into such samples; reads may split or merge the worker's
chunks, and counting frames from cumulative bytes makes that irrelevant. Its cost on
the hot path: two integer operations per chunk, one clock read per second of audio.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gateway.types import PoolName

PCM_BYTES_PER_FRAME = 1920
# Frames between two pace samples: the worker's steady chunk size (25 frames = 48000 bytes).
SAMPLE_FRAMES = 25


class StreamOutcome(StrEnum):
    COMPLETED = "completed"  # the worker sent the whole clip
    CUT = "cut"  # the worker's stream broke or went silent after audio flowed
    RETRIED = "retried"  # failed before the first byte; the request went to another worker
    CLIENT_DISCONNECTED = "client_disconnected"  # the client left; the stream was abandoned
    ERROR = "error"  # failed before the first byte and was not retried (the request failed)


@dataclass(frozen=True, slots=True)
class PaceSample:
    """``frames`` decoded in ``seconds`` while the worker carried ``load`` requests."""

    load: int
    frames: int
    seconds: float


@dataclass(frozen=True, slots=True)
class StreamObservation:
    worker_id: str
    pool: PoolName
    # The worker's in-flight count from this gateway when the request was dispatched,
    # this request included.
    load_at_dispatch: int
    # Dispatch to the first non-empty upstream chunk; None when none arrived.
    ttfp_s: float | None
    pace: tuple[PaceSample, ...] = ()
    outcome: StreamOutcome = StreamOutcome.COMPLETED
    bytes: int = 0  # PCM bytes received
    # What the policy predicted for this placement (None: the policy does not predict).
    predicted_ttfp_s: float | None = None
    predicted_rtf: float | None = None

    @property
    def observed_rtf(self) -> float | None:
        """The stream's decode pace as a real-time factor (None without a full second of audio)."""
        frames = sum(sample.frames for sample in self.pace)
        if not frames:
            return None
        return sum(sample.seconds for sample in self.pace) / frames * SAMPLE_FRAMES  # 25 frames = 1 s


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
        frames = self._bytes // PCM_BYTES_PER_FRAME
        if self.first_at is None:
            if not size:
                return
            now = self._clock()
            self.first_at = now
            self._mark_at, self._mark_frames, self._mark_load = now, frames, self._load()
        elif frames - self._mark_frames >= SAMPLE_FRAMES:
            now, load = self._clock(), self._load()
            # Tagged with the load half-way: it may have changed during the second.
            self.samples.append(PaceSample((self._mark_load + load + 1) // 2, frames - self._mark_frames, now - self._mark_at))
            self._mark_at, self._mark_frames, self._mark_load = now, frames, load

    @property
    def bytes(self) -> int:
        return self._bytes


class StreamObserver(Protocol):
    def on_stream_done(self, observation: StreamObservation) -> None: ...


class NoStreamObserver:
    """The default: observations are dropped."""

    def on_stream_done(self, observation: StreamObservation) -> None:
        pass
