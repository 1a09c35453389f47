"""Synthetic worker audio and helpers to feed encoders and decode what they produce."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import cycle

import av
import numpy as np

from gateway.audio import AudioFormat, StreamEncoder
from gateway.types.codec import SAMPLE_RATE

# Irregular chunk sizes as TCP would deliver them: odd byte counts split samples.
IRREGULAR_CHUNK_BYTES = (1, 961, 4801, 1920, 24_001, 7, 48_000, 333, 2, 12_345)

_DEMUXERS = {
    AudioFormat.MP3: "mp3",
    AudioFormat.AAC: "aac",
    AudioFormat.OPUS: "ogg",
    AudioFormat.FLAC: "flac",
    AudioFormat.WAV: "wav",
}


def chirp_pcm(seconds: float, start_hz: float = 150.0, end_hz: float = 3000.0) -> bytes:
    """A linear chirp at half scale, as worker PCM."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    sweep = start_hz * t + (end_hz - start_hz) * t * t / (2 * seconds)
    return (0.5 * 32767 * np.sin(2 * np.pi * sweep)).astype("<i2").tobytes()


def tone_pcm(seconds: float, hz: float) -> bytes:
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.5 * 32767 * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes()


def irregular_chunks(data: bytes) -> Iterator[bytes]:
    offset = 0
    for size in cycle(IRREGULAR_CHUNK_BYTES):
        if offset >= len(data):
            return
        yield data[offset : offset + size]
        offset += size


def encode_all(encoder: StreamEncoder, pcm: bytes) -> tuple[list[bytes], bytes]:
    """(outputs of every encode() call, output of finish()).

    The first audio is the worker's first chunk (one 40 ms frame, here with its first byte
    arriving alone), then irregular chunks: the early start pads behind the first audio,
    so the first call decides where that silence goes.
    """
    first = 1920
    chunks = [pcm[:1], pcm[1:first], *irregular_chunks(pcm[first:])]
    outputs = [encoder.encode(chunk) for chunk in chunks]
    return outputs, encoder.finish()


@dataclass(frozen=True)
class Decoded:
    sample_rate: int
    channels: int
    samples: np.ndarray  # mono float or int samples, concatenated

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.sample_rate


def decode(fmt: AudioFormat, data: bytes) -> Decoded:
    """Decode an encoded stream with PyAV as a client would (the pcm format is read raw)."""
    if fmt is AudioFormat.PCM:
        return Decoded(SAMPLE_RATE, 1, np.frombuffer(data, dtype="<i2"))
    with av.open(io.BytesIO(data), format=_DEMUXERS[fmt]) as container:
        stream = container.streams.audio[0]
        frames = list(container.decode(stream))
    assert frames, "no audio decoded"
    first = frames[0]
    channels = len(first.layout.channels)
    samples = np.concatenate([frame.to_ndarray().reshape(channels, -1)[0] for frame in frames])
    return Decoded(first.sample_rate, channels, samples)


def dominant_hz(samples: np.ndarray, sample_rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64) * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * sample_rate / len(samples))


def quiet_pcm(seconds: float, seed: int = 0) -> bytes:
    """Room tone well under -40 dBFS (peak 131 of 32767), like the quiet a speech clip ends in."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(int(seconds * SAMPLE_RATE)) * 44.0
    return np.clip(noise, -131, 131).astype("<i2").tobytes()


def worker_chunks(pcm: bytes) -> list[bytes]:
    """The worker's pattern: one 40 ms codec frame, then 1 s chunks."""
    first = 1920
    return [pcm[:first]] + [pcm[i : i + 48_000] for i in range(first, len(pcm), 48_000)]
