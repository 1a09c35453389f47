"""Stand-ins for what a session reports to (the recorder in the gateway)."""

from __future__ import annotations

from gateway.types import PoolName


class NullSessionObserver:
    """A ``SessionObserver`` for tests that look at the socket, not the metrics."""

    def session_opened(self) -> None:
        pass

    def session_closed(self, reason: str) -> None:
        pass

    def utterance_started(self) -> None:
        pass

    def sentence_routed(self, pool: PoolName, reason: str) -> None:
        pass

    def utterance_first_audio(self, seconds: float) -> None:
        pass

    def sentence_gap(self, seconds: float) -> None:
        pass

    def barge_in(self, seconds: float) -> None:
        pass

    def audio_buffered(self, delta_bytes: int) -> None:
        pass
