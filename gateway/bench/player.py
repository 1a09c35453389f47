"""A simulated real-time player: when would a listener hear silence?

Audio (24 kHz s16le mono, as a voice session streams it) starts playing the moment its
first byte arrives and then plays at exactly real time. A gap is any stretch, after that
start and before the utterance's last byte has played, in which the player has nothing
left to play: a chunk that arrives after everything before it has already been heard.
All times are in one unit (the benchmark converts wall clock to modelled seconds first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SAMPLE_RATE = 24000
BYTES_PER_SECOND = SAMPLE_RATE * 2  # s16le mono
_EPSILON_S = 1e-6  # float noise from summing chunk durations, far below one sample (42 us)


@dataclass
class Player:
    """Feed it chunks in arrival order; it keeps the gaps a listener sits through."""

    bytes_per_second: float = BYTES_PER_SECOND
    started_at: float | None = None
    played_until: float = 0.0  # the moment the audio received so far has all been played
    total_bytes: int = 0
    gaps: list[float] = field(default_factory=list)  # one entry per silence, in seconds
    gap_starts: list[float] = field(default_factory=list)

    def add(self, at: float, size: int) -> float:
        """A chunk of ``size`` bytes arrived at ``at``; returns the silence it ended (0 if none)."""
        if size <= 0:
            return 0.0
        gap = 0.0
        if self.started_at is None:
            self.started_at = at
            self.played_until = at
        elif at > self.played_until + _EPSILON_S:
            gap = at - self.played_until
            self.gaps.append(gap)
            self.gap_starts.append(self.played_until)
            self.played_until = at
        self.played_until += size / self.bytes_per_second
        self.total_bytes += size
        return gap

    @property
    def audio_s(self) -> float:
        return self.total_bytes / self.bytes_per_second


def gaps_of(chunks: list[tuple[float, int]], bytes_per_second: float = BYTES_PER_SECOND) -> list[float]:
    """Every silence a player suffers on ``(arrival time, bytes)`` chunks, in arrival order."""
    player = Player(bytes_per_second)
    for at, size in chunks:
        player.add(at, size)
    return player.gaps
