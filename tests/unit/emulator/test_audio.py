"""Synthetic speech: speech-shaped, deterministic, the same however it is chunked."""

from __future__ import annotations

import numpy as np

from gateway.emulator.audio import BYTES_PER_FRAME, SAMPLES_PER_FRAME, SpeechSynth, voice_pitch_hz

TEXT = "Hello there, this is a test. Another sentence follows, with a pause!"


def frame_rms(pcm: bytes) -> np.ndarray:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64).reshape(-1, SAMPLES_PER_FRAME)
    return np.sqrt((samples**2).mean(axis=1))


def dominant_pitch(segment: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(segment * np.hanning(len(segment))))
    freqs = np.fft.rfftfreq(len(segment), 1 / 24000)
    band = (freqs > 60) & (freqs < 400)
    return float(freqs[band][np.argmax(spectrum[band])])


def test_frames_are_40_ms_of_s16le() -> None:
    assert (SAMPLES_PER_FRAME, BYTES_PER_FRAME) == (960, 1920)
    synth = SpeechSynth(TEXT, 10 * SAMPLES_PER_FRAME, 42)
    assert len(synth.frames_pcm(0, 1)) == 1920
    assert len(synth.frames_pcm(1, 9)) == 9 * 1920
    assert len(synth.frames_pcm(9, 5)) == 1920  # never past the end


def test_chunking_does_not_change_the_audio() -> None:
    synth = SpeechSynth(TEXT, 120 * SAMPLES_PER_FRAME, 42)
    whole = synth.frames_pcm(0, 120)
    pieces = b"".join(synth.frames_pcm(start, count) for start, count in [(0, 1), (1, 25), (26, 25), (51, 25), (76, 44)])
    assert pieces == whole


def test_deterministic_per_seed_text_and_voice() -> None:
    def render(text: str = TEXT, seed: int = 42, pitch: float = 125.0) -> bytes:
        return SpeechSynth(text, 80 * SAMPLES_PER_FRAME, seed, pitch).frames_pcm(0, 80)

    assert render() == render()
    assert render(seed=7) != render()
    assert render(text="Something else entirely, said slowly.") != render()
    assert render(pitch=voice_pitch_hz("anna")) != render()
    assert voice_pitch_hz("Anna") == voice_pitch_hz("anna")


def test_sounds_like_words_and_pauses() -> None:
    frames = 150
    rms = frame_rms(SpeechSynth(TEXT, frames * SAMPLES_PER_FRAME, 42).frames_pcm(0, frames))
    loud, quiet = rms > 1500, rms < 300
    assert loud.mean() > 0.4  # mostly voiced
    assert quiet.sum() >= 3  # pauses between words and sentences
    assert (rms > 0).all()  # room tone: never digital silence
    # Several separate voiced stretches (words), not one constant tone.
    onsets = np.count_nonzero(np.diff(loud.astype(int)) == 1)
    assert onsets >= 5


def test_pitch_moves_between_words() -> None:
    synth = SpeechSynth(TEXT, 150 * SAMPLES_PER_FRAME, 42)
    samples = np.frombuffer(synth.frames_pcm(0, 150), dtype="<i2").astype(np.float64)
    rms = frame_rms(synth.frames_pcm(0, 150))
    voiced = [i for i in range(150) if rms[i] > 2000]
    pitches = {round(dominant_pitch(samples[i * 960 : (i + 3) * 960])) for i in voiced[::6]}
    assert len(pitches) >= 4


def test_level_is_healthy_and_unclipped() -> None:
    samples = np.frombuffer(SpeechSynth(TEXT, 100 * SAMPLES_PER_FRAME, 1).frames_pcm(0, 100), dtype="<i2")
    assert 3000 < np.abs(samples).max() < 32000
