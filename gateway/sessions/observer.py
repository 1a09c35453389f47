"""What sessions report for metrics and logs (the recorder implements it)."""

from __future__ import annotations

from typing import Protocol

from gateway.types import PoolName


class SessionObserver(Protocol):
    def session_opened(self) -> None: ...

    def session_closed(self, reason: str) -> None: ...

    def utterance_started(self) -> None: ...

    def sentence_routed(self, pool: PoolName, reason: str) -> None: ...

    # From the moment the utterance's first sentence was complete to its first audio byte sent.
    def utterance_first_audio(self, seconds: float) -> None: ...

    # The silence a real-time player sits through before a later sentence's first audio.
    def sentence_gap(self, seconds: float) -> None: ...

    # input.cancel received -> every upstream request of the utterance ended, answer sent.
    def barge_in(self, seconds: float) -> None: ...

    # Audio received from a worker (+) or sent to the client or dropped (-): bytes held.
    def audio_buffered(self, delta_bytes: int) -> None: ...
