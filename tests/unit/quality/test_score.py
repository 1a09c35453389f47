"""The signal checks on clean, noisy, silent and clipped speech from the emulator's voice."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.emulator.faults import Faults
from gateway.emulator.spoken import SpeechAudio
from gateway.quality.score import Floors, Verdict, score_pcm

TEXT = "The quick brown fox jumps over the lazy dog. It was a bright cold day in April."


@pytest.fixture(scope="module")
def speech() -> bytes:
    async def render() -> bytes:
        clip = SpeechAudio().clip(TEXT, 24000 * 5, 42, None)
        await clip.ready(clip.total_samples)
        return clip.pcm(0, clip.total_samples)

    return asyncio.run(render())


def chunked(faults: Faults, pcm: bytes, running: int) -> bytes:
    return b"".join(faults.degrade(pcm[i : i + 48000], running, i) for i in range(0, len(pcm), 48000))


def test_clean_speech_passes_every_check(speech: bytes) -> None:
    score = score_pcm(speech)
    assert score.verdict(Floors()) is Verdict.OK
    assert score.hnr_db is not None and score.hnr_db > 6.0
    assert score.clipped_share == 0.0 and score.silent_share < 0.2


@pytest.mark.parametrize(
    ("fault", "verdict"), [("noisy_from", Verdict.NOISY), ("silent_from", Verdict.SILENT), ("clipped_from", Verdict.CLIPPED)]
)
def test_each_audio_fault_fails_its_check_from_its_concurrency(speech: bytes, fault: str, verdict: Verdict) -> None:
    faults = Faults(**{fault: 8})  # type: ignore[arg-type]
    assert score_pcm(chunked(faults, speech, 7)).verdict(Floors()) is Verdict.OK  # below it: untouched
    assert chunked(faults, speech, 7) == speech
    assert score_pcm(chunked(faults, speech, 8)).verdict(Floors()) is verdict


def test_noise_scores_below_the_ci_floor_and_a_tone_above() -> None:
    rng = np.random.default_rng(1)
    noise = (rng.normal(0, 3000, 24000 * 2)).astype("<i2").tobytes()
    tone = (3000 * np.sin(2 * np.pi * 150 * np.arange(24000 * 2) / 24000)).astype("<i2").tobytes()
    assert (score_pcm(noise).hnr_db or 0) < -5.0
    assert (score_pcm(tone).hnr_db or 0) > 20.0


def test_level_out_of_range_and_empty_input() -> None:
    quiet = (100 * np.sin(2 * np.pi * 150 * np.arange(24000) / 24000)).astype("<i2").tobytes()
    score = score_pcm(quiet)
    assert score.verdict(Floors()) in (Verdict.SILENT, Verdict.LEVEL)
    assert score_pcm(b"").verdict(Floors()) is Verdict.SILENT
    assert score_pcm(b"\x01").seconds == 0.0
