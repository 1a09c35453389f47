"""Audio the tests upload: a real WAV a gateway and a worker accept as a voice sample."""

from __future__ import annotations

import io
import wave

import numpy as np


def reference_wav(seconds: float = 2.5, pitch_hz: float = 180.0) -> bytes:
    """A real 24 kHz mono 16-bit WAV (a voiced tone with a syllable-like envelope): a
    reference sample the gateway accepts for a voice or a ``ref_audio`` data: URI."""
    rate = 24_000
    t = np.arange(int(seconds * rate)) / rate
    envelope = 0.5 * (1 - np.cos(2 * np.pi * 3.0 * t))
    signal = sum(a * np.sin(2 * np.pi * pitch_hz * k * t) for k, a in ((1, 0.6), (2, 0.25), (3, 0.1)))
    pcm = (signal * envelope * 0.5 * 32767).astype("<i2").tobytes()
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    return buffer.getvalue()
