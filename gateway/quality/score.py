"""Signal checks of one clip of 24 kHz mono s16le PCM: cheap enough for every sampled stream.

HNR follows the autocorrelation method vllm-omni's CI uses for its Higgs concurrency check
(Boersma 1993, simplified): per 40 ms voiced frame, the peak of the normalised
autocorrelation ``r`` over the pitch lags gives HNR = 10·log10(r / (1 − r)); the clip's is
the median over its voiced frames. Speech sits well above 0 dB, white noise near −10 dB, and
the regressions the CI caught (concurrent streams whose harmonics drowned) near −4 dB.
Clipping, silence and level catch the other ways a broken graph sounds: full-scale square
waves, dead air, or a level no speaker produces.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from gateway.types.codec import SAMPLE_RATE

FRAME_S = 0.04  # one codec frame: the unit the workers stream in
# Pitch range of speech, 60-400 Hz, as autocorrelation lags on a 6 kHz analysis signal
# (Nyquist 3 kHz: the fundamental and its first harmonics, which is what HNR weighs).
_DECIMATE = 4
_RATE = SAMPLE_RATE // _DECIMATE
_MIN_LAG = _RATE // 400
_MAX_LAG = _RATE // 60
_FRAME = int(FRAME_S * _RATE)
_FFT = 1 << int(np.ceil(np.log2(2 * _FRAME)))
CLIP_LEVEL = 32000  # |sample| at or above this counts as clipped (full scale is 32767)
# Frames quieter than this are silence (pauses between words, breaths): -45 dBFS.
SILENCE_RMS = 32768 * 10 ** (-45 / 20)
# r is capped below 1 so a pure tone scores high but finite.
_R_MAX = 0.9999
# HNR is the median over at most this many voiced frames, spread evenly over the clip
# (2.5 s of speech): a longer clip costs no more to judge, and the median hardly moves.
HNR_FRAMES = 64


class Verdict(StrEnum):
    """``higgs_gateway_quality_samples_total{verdict}``: what a sampled stream sounded like."""

    OK = "ok"
    NOISY = "noisy"  # HNR below the floor: harmonics drowned in noise
    CLIPPED = "clipped"  # too many samples at full scale
    SILENT = "silent"  # (almost) nothing above the silence level
    LEVEL = "level"  # voiced, but at a level no speech has (too quiet or too loud)


@dataclass(frozen=True, slots=True)
class Floors:
    """Where a clip stops being fit to serve (``quality`` in the gateway config)."""

    hnr_floor_db: float = -2.0
    max_clipped_share: float = 0.01
    max_silent_share: float = 0.9
    min_level_dbfs: float = -40.0
    max_level_dbfs: float = -3.0


@dataclass(frozen=True, slots=True)
class Score:
    seconds: float
    hnr_db: float | None  # None: no voiced frame to measure
    clipped_share: float
    silent_share: float
    level_dbfs: float | None  # RMS of the voiced frames; None when all silent

    def verdict(self, floors: Floors) -> Verdict:
        """The first failed check, most specific first (a clipped clip is also noisy)."""
        if self.silent_share > floors.max_silent_share or self.level_dbfs is None:
            return Verdict.SILENT
        if self.clipped_share > floors.max_clipped_share:
            return Verdict.CLIPPED
        if not floors.min_level_dbfs <= self.level_dbfs <= floors.max_level_dbfs:
            return Verdict.LEVEL
        if self.hnr_db is not None and self.hnr_db < floors.hnr_floor_db:
            return Verdict.NOISY
        return Verdict.OK

    def as_dict(self) -> dict[str, float | None]:
        def rounded(value: float | None, digits: int) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "seconds": round(self.seconds, 2),
            "hnr_db": rounded(self.hnr_db, 2),
            "clipped_share": round(self.clipped_share, 4),
            "silent_share": round(self.silent_share, 3),
            "level_dbfs": rounded(self.level_dbfs, 1),
        }


def score_pcm(pcm: bytes) -> Score:
    """Score s16le mono PCM at 24 kHz (an odd trailing byte is ignored)."""
    pcm16 = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")
    seconds = pcm16.size / SAMPLE_RATE
    if pcm16.size == 0:
        return Score(0.0, None, 0.0, 1.0, None)
    clipped = float(np.count_nonzero((pcm16 >= CLIP_LEVEL) | (pcm16 <= -CLIP_LEVEL))) / pcm16.size
    count = pcm16.size // (_FRAME * _DECIMATE)
    if count == 0:
        return Score(seconds, None, clipped, 1.0, None)
    full = pcm16[: count * _FRAME * _DECIMATE].reshape(count, _FRAME * _DECIMATE).astype(np.float32)
    energy = np.einsum("ij,ij->i", full, full) / full.shape[1]  # mean square per 40 ms frame, full rate
    voiced_rows = np.flatnonzero(energy >= SILENCE_RMS**2)
    silent_share = 1.0 - voiced_rows.size / count
    if voiced_rows.size == 0:
        return Score(seconds, None, clipped, silent_share, None)
    level = float(10 * np.log10(energy[voiced_rows].mean() / 32768**2 + 1e-12))
    picked = voiced_rows[np.linspace(0, voiced_rows.size - 1, min(HNR_FRAMES, voiced_rows.size)).astype(int)]
    # Decimate by averaging groups of 4: a crude low-pass, enough for lags of 60-400 Hz pitch.
    frames = full[picked].reshape(picked.size, _FRAME, _DECIMATE).mean(axis=2)
    return Score(seconds, _hnr_db(frames), clipped, silent_share, level)


def _window_acf() -> tuple[np.ndarray, np.ndarray]:
    window = np.hanning(_FRAME).astype(np.float32)
    spectrum = np.fft.rfft(window, n=_FFT)
    acf = np.fft.irfft(spectrum.real**2 + spectrum.imag**2, n=_FFT)[: _MAX_LAG + 1]
    return window, (acf / acf[0]).astype(np.float32)


_WINDOW, _WINDOW_ACF = _window_acf()


def _hnr_db(frames: np.ndarray) -> float:
    """Median HNR over voiced frames from their normalised autocorrelation peak."""
    centred = frames - frames.mean(axis=1, keepdims=True)
    spectrum = np.fft.rfft(centred * _WINDOW, n=_FFT, axis=1)
    acf = np.fft.irfft(spectrum.real**2 + spectrum.imag**2, n=_FFT, axis=1)[:, : _MAX_LAG + 1]
    # Divide by the window's own autocorrelation (Boersma): the lag taper is not the signal's.
    normalised = (acf / np.maximum(acf[:, :1], 1e-9)) / _WINDOW_ACF
    peak = np.clip(normalised[:, _MIN_LAG:].max(axis=1), 1e-4, _R_MAX)
    return float(np.median(10 * np.log10(peak / (1 - peak))))
