"""Where a real-time player is: gaps and a later sentence's deadline."""

from __future__ import annotations

from gateway.sessions.playback import Playback


def test_a_player_fed_in_time_has_no_gap_and_a_late_sentence_makes_one() -> None:
    player = Playback()
    assert player.delivered(10.0, 2.0) == 0.0  # starts at its first audio: plays until 12
    assert player.delivered(11.0, 1.0) == 0.0  # came while it still had audio: until 13
    assert player.due_in(11.5, 0.5) == 2.0  # what follows 0.5 s more is reached at 13.5
    assert player.delivered(13.5, 1.0) == 0.5  # sat silent from 13 to 13.5
    assert player.ends_at == 14.5


def test_a_silent_player_resumes_with_the_next_audio() -> None:
    player = Playback()
    assert player.due_in(5.0, 1.5) == 1.5  # nothing played yet
    player.delivered(5.0, 1.0)
    assert player.due_in(8.0, 0.0) == 0.0  # ran dry at 6: the next audio is due now
