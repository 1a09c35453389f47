"""The gateway's own delay to first audio: a prior per format and speed, then learned."""

from __future__ import annotations

import pytest

from gateway.audio import AudioFormat
from gateway.audio.delay import PRIOR_S, STRETCH_PRIOR_S, FirstAudioDelays


def test_prior_by_format_plus_one_share_per_atempo_stage() -> None:
    delays = FirstAudioDelays()
    assert delays.predict(AudioFormat.PCM, 1.0) == 0.0
    assert delays.predict(AudioFormat.MP3, 1.0) == PRIOR_S[AudioFormat.MP3]
    assert delays.predict(AudioFormat.MP3, 1.5) == pytest.approx(PRIOR_S[AudioFormat.MP3] + STRETCH_PRIOR_S)
    assert delays.predict(AudioFormat.MP3, 0.3) == pytest.approx(PRIOR_S[AudioFormat.MP3] + 2 * STRETCH_PRIOR_S)


def test_measurements_move_the_average_from_the_prior() -> None:
    delays = FirstAudioDelays(weight=0.5)
    delays.observe(AudioFormat.AAC, 1.0, 0.010)
    assert delays.predict(AudioFormat.AAC, 1.0) == pytest.approx((PRIOR_S[AudioFormat.AAC] + 0.010) / 2)
    for _ in range(30):
        delays.observe(AudioFormat.AAC, 1.0, 0.010)
    assert delays.predict(AudioFormat.AAC, 1.0) == pytest.approx(0.010, rel=1e-3)
    assert delays.predict(AudioFormat.AAC, 1.5) == pytest.approx(PRIOR_S[AudioFormat.AAC] + STRETCH_PRIOR_S)  # its own key
    assert delays.snapshot() == {"aac": pytest.approx(10.0, rel=1e-3)}


def test_one_stall_is_bounded() -> None:
    delays = FirstAudioDelays(weight=1.0)
    delays.observe(AudioFormat.PCM, 0.8, 30.0)
    assert delays.predict(AudioFormat.PCM, 0.8) == 0.25
