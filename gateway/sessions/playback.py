"""Deadline bookkeeping: where a real-time player of the session is.

The gateway sends audio as it comes; the client plays it in real time from its first
byte. ``Playback`` follows that player: when it will have played everything sent so far
(``ends_at``), and how long it sat silent when audio came after that (a *gap*). A later
sentence's deadline is the moment the player reaches it: ``ends_at`` plus the audio still
to come before it (``SentencePipeline`` sums it, estimating what is not synthesized yet).
"""

from __future__ import annotations

from gateway.types.codec import BYTES_PER_SECOND


def pcm_seconds(num_bytes: int) -> float:
    return num_bytes / BYTES_PER_SECOND


class Playback:
    __slots__ = ("ends_at",)

    def __init__(self) -> None:
        self.ends_at: float | None = None  # None: nothing played yet

    def delivered(self, now: float, seconds: float) -> float:
        """``seconds`` of audio reached the client at ``now``; returns the silence the
        player sat through before it (0 when it still had audio to play)."""
        ends_at = self.ends_at
        gap = 0.0 if ends_at is None or now <= ends_at else now - ends_at
        self.ends_at = (now if ends_at is None or now > ends_at else ends_at) + seconds
        return gap

    def due_in(self, now: float, ahead_s: float) -> float:
        """Seconds from ``now`` until the player reaches audio that follows ``ahead_s``
        more seconds after everything sent (a silent player resumes with the next audio)."""
        ends_at = self.ends_at
        start = now if ends_at is None or ends_at < now else ends_at
        return start + ahead_s - now
