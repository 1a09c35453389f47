"""Real, tiny audio files for the voice tests (made in memory, no fixtures on disk)."""

from __future__ import annotations

import io
import wave

import av
import numpy as np


def tone(seconds: float, rate: int = 24_000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2")


def wav_bytes(seconds: float = 2.0, rate: int = 24_000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(tone(seconds, rate).tobytes())
    return buf.getvalue()


# container -> (codec, stream rate)
ENCODINGS = {
    "mp3": ("libmp3lame", 24_000),
    "flac": ("flac", 24_000),
    "ogg": ("libopus", 48_000),
    "webm": ("libopus", 48_000),
    "ipod": ("aac", 24_000),  # .m4a
    "adts": ("aac", 24_000),  # raw .aac
}


def encoded(container: str, seconds: float = 2.0) -> bytes:
    codec, rate = ENCODINGS[container]
    out = io.BytesIO()
    with av.open(out, "w", format=container) as oc:
        stream = oc.add_stream(codec, rate=rate)
        stream.layout = "mono"
        samples = tone(seconds, rate).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            oc.mux(packet)
        for packet in stream.encode(None):
            oc.mux(packet)
    return out.getvalue()
