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


def test_another_sample_rate_learns_apart_from_the_workers_rate() -> None:
    # mp3 at 16 kHz has no early start: it waits for the worker's second chunk (~250 ms).
    delays = FirstAudioDelays(weight=0.5)
    for _ in range(10):
        delays.observe(AudioFormat.MP3, 1.0, 0.240, sample_rate=16_000)
    assert delays.predict(AudioFormat.MP3, 1.0, sample_rate=16_000) == pytest.approx(0.240, rel=1e-2)
    assert delays.predict(AudioFormat.MP3, 1.0) == PRIOR_S[AudioFormat.MP3]  # the common request untouched
    assert delays.predict(AudioFormat.MP3, 1.0, sample_rate=24_000) == PRIOR_S[AudioFormat.MP3]  # the workers' own rate
    assert set(delays.snapshot()) == {"mp3/resampled"}
