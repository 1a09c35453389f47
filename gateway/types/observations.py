"""What one upstream stream showed: the data the performance model learns from.

One ``StreamObservation`` per attempt on a worker (a retried request yields one per
worker tried), carried by the relay's ``StreamEnded`` event when the attempt's stream
closes; the recorder passes each on to ``StreamObserver``s (the routing's performance
model).

Every 40 ms codec frame a worker streams is one of its decode steps, so the time a stream
takes to deliver 25 more frames (one second of audio) is 25 decode steps at the load the
worker carried meanwhile; ``gateway.upstream.pace.PaceMeter`` measures such samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gateway.types import PoolName
from gateway.types.codec import FRAMES_PER_SECOND


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
        return sum(sample.seconds for sample in self.pace) / frames * FRAMES_PER_SECOND


class StreamObserver(Protocol):
    def on_stream_done(self, observation: StreamObservation) -> None: ...
