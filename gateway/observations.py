"""What one upstream stream showed: the data a performance model learns from.

One ``StreamObservation`` per attempt on a worker (a retried request yields one per
worker tried), handed to a ``StreamObserver`` when the attempt ends. The composition
root plugs a consumer in (``create_app(..., stream_observer=...)``); by default nobody
listens. Cheap by design: two clock reads at dispatch and first chunk, one per full
chunk, and a single small object per attempt.

A full chunk is 48000 bytes of 24 kHz s16le PCM: one second of audio, 25 decode steps
of the talker, so the spacing of full chunks at a known load is the worker's step time.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gateway.types import PoolName

FULL_CHUNK_BYTES = 48_000


class StreamOutcome(StrEnum):
    COMPLETED = "completed"  # the worker sent the whole clip
    CUT = "cut"  # the worker's stream broke or went silent after audio flowed
    RETRIED = "retried"  # failed before the first byte; the request went to another worker
    CLIENT_DISCONNECTED = "client_disconnected"  # the client left; the stream was abandoned
    ERROR = "error"  # failed before the first byte and was not retried (the request failed)


@dataclass(frozen=True, slots=True)
class StreamObservation:
    worker_id: str
    pool: PoolName
    # The worker's in-flight count from this gateway when the request was dispatched,
    # this request included.
    load_at_dispatch: int
    dispatched_at: float  # monotonic seconds
    # Dispatch to the first non-empty upstream chunk; None when none arrived.
    ttfp_s: float | None
    chunks: int  # upstream chunks received (any size)
    bytes: int  # PCM bytes received
    full_chunks: int  # chunks of exactly FULL_CHUNK_BYTES
    # Seconds between the first and the last full chunk's arrival (0.0 with fewer than two).
    full_chunk_span_s: float
    outcome: StreamOutcome


class StreamObserver(Protocol):
    def on_stream_done(self, observation: StreamObservation) -> None: ...


class NoStreamObserver:
    """The default: observations are dropped."""

    def on_stream_done(self, observation: StreamObservation) -> None:
        pass
