"""Speech-like audio for the emulator: voiced words with moving pitch, pauses between them.

Not speech, but close enough in shape that players, encoders, silence detectors and
anyone listening can tell it apart from silence or a test tone: each word is a voiced
segment (a few harmonics with a pitch glide and a syllable envelope), words are separated
by short pauses and sentences by longer ones, and the whole plan is stretched to the
clip's duration so it follows the text.

Every sample is a closed-form function of its index (phase of a linear glide, hashed
noise), so any frame range can be synthesised on its own, lazily per chunk, and the
result does not depend on how the clip is cut into chunks. Deterministic for a given
(text, seed, voice).
"""

from __future__ import annotations

import re
import zlib

import numpy as np

from gateway.types.codec import SAMPLE_RATE, SAMPLES_PER_FRAME

BYTES_PER_FRAME = SAMPLES_PER_FRAME * 2

_TOKENS = re.compile(r"[^\W_]+(?:'[^\W_]+)*|[.!?;:,]")
_HARMONICS = np.array([1.0, 0.55, 0.32, 0.18, 0.1], dtype=np.float64)
_PEAK = 0.32  # of full scale: a normal speaking level with headroom


def voice_pitch_hz(voice_key: str | None) -> float:
    """A stable base pitch per voice (no voice: a low-mid default)."""
    if not voice_key:
        return 125.0
    return 90.0 + (zlib.crc32(voice_key.lower().encode()) % 140)


def noise_key(text: str, seed: int) -> int:
    """The room tone's key: the same request (text and seed) hisses the same way."""
    return (zlib.crc32(text.encode()) ^ (seed * 2654435761)) & 0xFFFFFFFF


class SampledClip:
    """A clip read range by range: subclasses give float ``samples``, this encodes them."""

    def samples(self, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError

    def pcm(self, start: int, stop: int) -> bytes:
        """s16le PCM for sample indices ``[start, stop)``."""
        return to_pcm16(self.samples(start, stop))

    def frames_pcm(self, first_frame: int, frames: int) -> bytes:
        start = first_frame * SAMPLES_PER_FRAME
        return self.pcm(start, start + frames * SAMPLES_PER_FRAME)


class SpeechSynth(SampledClip):
    """One clip of ``total_samples`` samples for ``text``, synthesised range by range."""

    def __init__(self, text: str, total_samples: int, seed: int, base_pitch_hz: float = 125.0) -> None:
        self.total_samples = max(0, int(total_samples))
        self._noise_key = noise_key(text, seed)
        rng = np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(text.encode())])
        starts, lengths, f0a, f0b, amps, syllables = _plan(text, self.total_samples, rng, base_pitch_hz)
        self._starts = starts
        self._ends = starts + lengths
        self._lengths = lengths
        self._f0a = f0a
        self._f0b = f0b
        self._amps = amps
        self._syllables = syllables

    def samples(self, start: int, stop: int) -> np.ndarray:
        """Float samples in [-1, 1] for sample indices ``[start, stop)``."""
        start, stop = max(0, start), min(self.total_samples, stop)
        out = np.zeros(max(0, stop - start), dtype=np.float64)
        if stop <= start:
            return out
        first = int(np.searchsorted(self._ends, start, side="right"))
        last = int(np.searchsorted(self._starts, stop, side="left"))
        for seg in range(first, last):
            seg_start, seg_end = int(self._starts[seg]), int(self._ends[seg])
            lo, hi = max(start, seg_start), min(stop, seg_end)
            if hi <= lo:
                continue
            out[lo - start : hi - start] = self._segment(seg, lo - seg_start, hi - seg_start)
        out += hashed_noise(start, stop, self._noise_key) * 0.004  # room tone, never digital silence
        return out

    def _segment(self, seg: int, lo: int, hi: int) -> np.ndarray:
        length = int(self._lengths[seg])
        duration = length / SAMPLE_RATE
        t = np.arange(lo, hi, dtype=np.float64) / SAMPLE_RATE
        f_a, f_b = self._f0a[seg], self._f0b[seg]
        # Cycles of a linear pitch glide from f_a to f_b: continuous at every sample.
        cycles = f_a * t + (f_b - f_a) * t * t / (2.0 * duration)
        wave = _WAVE_TABLE[((cycles % 1.0) * _TABLE_SIZE).astype(np.intp)]
        # Syllables: a raised-sine envelope repeated across the word, never fully closed.
        syllable_pos = (t / duration) * self._syllables[seg]
        envelope = _ENVELOPE_TABLE[((syllable_pos % 1.0) * _TABLE_SIZE).astype(np.intp)]
        # Word onset/offset ramps (10 ms) so segments never click.
        ramp = min(240, length // 4) or 1
        index = np.arange(lo, hi)
        edge = np.minimum(np.minimum(index, length - 1 - index) / ramp, 1.0)
        breath = hashed_noise(lo, hi, self._noise_key ^ seg) * 0.08
        return self._amps[seg] * (wave + breath) * envelope * edge


def to_pcm16(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


# One period of a voiced waveform (a few decaying harmonics) and one syllable envelope,
# looked up by phase: several times cheaper than evaluating sines per sample.
_TABLE_SIZE = 4096
_TABLE_PHASE = np.arange(_TABLE_SIZE) / _TABLE_SIZE
_WAVE_TABLE = sum(w * np.sin(2 * np.pi * k * _TABLE_PHASE) for k, w in enumerate(_HARMONICS, start=1)) / _HARMONICS.sum()
_ENVELOPE_TABLE = 0.25 + 0.75 * np.sin(np.pi * _TABLE_PHASE) ** 0.7
# Fixed noise indexed by absolute sample position (plus a per-clip offset).
_NOISE_SIZE = 1 << 16
_NOISE_TABLE = np.random.default_rng(0x5EED).uniform(-1.0, 1.0, _NOISE_SIZE)


def hashed_noise(start: int, stop: int, key: int) -> np.ndarray:
    """Noise in [-1, 1) as a pure function of the absolute sample index and ``key``."""
    index = (np.arange(start, stop) + (key % _NOISE_SIZE)) & (_NOISE_SIZE - 1)
    return _NOISE_TABLE[index]


def _plan(
    text: str, total_samples: int, rng: np.random.Generator, base_pitch: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Voiced segments (one per word) laid out in time, stretched to ``total_samples``."""
    tokens = _TOKENS.findall(text) or [text.strip() or "a"]
    # Durations in arbitrary units first: words by length, pauses by punctuation.
    durations: list[float] = [0.06]  # lead-in silence
    voiced: list[bool] = [False]
    word_chars: list[int] = [0]
    for token in tokens:
        if token in ".!?":
            durations.append(0.35 + rng.uniform(0.0, 0.1))
            voiced.append(False)
            word_chars.append(0)
        elif token in ",;:":
            durations.append(0.18 + rng.uniform(0.0, 0.06))
            voiced.append(False)
            word_chars.append(0)
        else:
            if voiced[-1]:
                durations.append(0.05 + rng.uniform(0.0, 0.05))  # gap between words
                voiced.append(False)
                word_chars.append(0)
            durations.append(0.07 * max(2, len(token)) * rng.uniform(0.85, 1.15))
            voiced.append(True)
            word_chars.append(len(token))
    durations.append(0.08)  # tail
    voiced.append(False)
    word_chars.append(0)

    weights = np.array(durations)
    bounds = np.round(np.concatenate([[0.0], np.cumsum(weights)]) / weights.sum() * total_samples).astype(np.int64)
    keep = np.array(voiced) & (np.diff(bounds) > 0)
    starts = bounds[:-1][keep]
    lengths = np.diff(bounds)[keep]
    count = len(starts)
    # Pitch: declines over each sentence, each word glides up or down around it.
    position = np.linspace(0.0, 1.0, count) if count > 1 else np.zeros(count)
    sentence_fall = 1.0 - 0.15 * ((position * max(1, text.count(".") + 1)) % 1.0)
    centre = base_pitch * sentence_fall * 2.0 ** rng.normal(0.0, 0.08, count)
    glide = 2.0 ** rng.normal(0.0, 0.12, count)
    f0a = centre * np.sqrt(glide)
    f0b = centre / np.sqrt(glide)
    amps = _PEAK * rng.uniform(0.7, 1.0, count)
    chars = np.array(word_chars)[keep]
    syllables = np.maximum(1, np.round(chars / 3.0)).astype(np.float64)
    return starts, lengths, f0a, f0b, amps, syllables
