"""The simulated real-time player: audio plays from its first byte, a gap is silence after that."""

from __future__ import annotations

import pytest

from gateway.bench.voice_client import Player, gaps_of
from gateway.types.codec import BYTES_PER_SECOND

SECOND = BYTES_PER_SECOND  # one second of 24 kHz s16le mono


def test_chunks_that_arrive_before_the_buffer_runs_dry_leave_no_gap() -> None:
    # One second of audio at t=0, the next second at t=0.9: the player still has 0.1 s left.
    assert gaps_of([(0.0, SECOND), (0.9, SECOND), (1.95, SECOND)]) == []


def test_a_late_chunk_is_a_gap_as_long_as_the_silence_before_it() -> None:
    player = Player()
    assert player.add(0.0, SECOND // 2) == 0.0  # plays until 0.5
    assert player.add(0.8, SECOND) == pytest.approx(0.3)  # silent 0.5 -> 0.8, then plays to 1.8
    assert player.add(1.8, SECOND) == 0.0  # exactly on time: no gap
    assert player.gaps == [pytest.approx(0.3)]
    assert player.gap_starts == [pytest.approx(0.5)]
    assert player.played_until == pytest.approx(2.8)
    assert player.audio_s == pytest.approx(2.5)


def test_the_wait_for_the_first_byte_is_not_a_gap() -> None:
    player = Player()
    player.add(5.0, SECOND)
    assert player.started_at == 5.0 and player.gaps == []


def test_a_buffer_that_ran_ahead_absorbs_a_later_stall() -> None:
    # Audio made at twice real time builds a lead; a 1 s stall later costs nothing.
    chunks = [(0.1 * i, SECOND // 5) for i in range(10)]  # 2 s of audio by t=0.9
    chunks.append((2.0, SECOND))  # 2 s stall-free: buffered audio plays until 2.0
    assert gaps_of(chunks) == []
    assert gaps_of([*chunks[:-1], (2.25, SECOND)]) == [pytest.approx(0.25)]


def test_empty_chunks_neither_start_playback_nor_count() -> None:
    player = Player()
    assert player.add(1.0, 0) == 0.0
    assert player.started_at is None
    player.add(2.0, SECOND)
    assert player.started_at == 2.0
