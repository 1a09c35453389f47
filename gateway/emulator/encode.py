"""Audio containers the worker answers with: streaming WAV header and whole-file encodes.

The real worker streams only pcm and wav; whole files may also be flac, mp3 or opus, which
it encodes in one go at the end. PyAV does the encoding here.
"""

from __future__ import annotations

import io
import struct

import av
import numpy as np

from gateway.types.codec import CHANNELS, SAMPLE_RATE

CONTENT_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",  # audio_utils_mixin.py: create_audio writes Opus in an Ogg file
}
STREAMABLE_FORMATS = frozenset({"pcm", "wav"})

# (container, codec, sample format) for PyAV; 24 kHz is native to all three encoders.
_PYAV_FORMATS = {
    "flac": ("flac", "flac", "s16"),
    "mp3": ("mp3", "libmp3lame", "s16p"),
    "opus": ("ogg", "libopus", "s16"),
}


def streaming_wav_header(sample_rate: int = SAMPLE_RATE, channels: int = CHANNELS) -> bytes:
    """44-byte RIFF header whose two size fields are 0xFFFFFFFF (length unknown)."""
    return _wav_header(sample_rate, channels, 0xFFFFFFFF, 0xFFFFFFFF)


def wav_file(pcm: bytes, sample_rate: int = SAMPLE_RATE, channels: int = CHANNELS) -> bytes:
    return _wav_header(sample_rate, channels, 36 + len(pcm), len(pcm)) + pcm


def _wav_header(sample_rate: int, channels: int, riff_size: int, data_size: int) -> bytes:
    byte_rate = sample_rate * channels * 2
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF", riff_size, b"WAVE", b"fmt ", 16, 1, channels,
        sample_rate, byte_rate, channels * 2, 16, b"data", data_size,
    )  # fmt: skip


def encode_whole(pcm: bytes, response_format: str) -> bytes:
    """Encode a complete clip of s16le mono PCM into ``response_format``."""
    if response_format == "pcm":
        return pcm
    if response_format == "wav":
        return wav_file(pcm)
    container_name, codec, sample_format = _PYAV_FORMATS[response_format]
    samples = np.frombuffer(pcm, dtype="<i2")
    out = io.BytesIO()
    with av.open(out, mode="w", format=container_name) as container:
        stream = container.add_stream(codec, rate=SAMPLE_RATE)
        stream.layout = "mono"
        frame_size = stream.codec_context.frame_size or 1152
        for start in range(0, len(samples), frame_size):
            block = samples[start : start + frame_size]
            if len(block) < frame_size and codec == "libopus":
                block = np.pad(block, (0, frame_size - len(block)))  # opus needs whole frames
            frame = av.AudioFrame.from_ndarray(block.reshape(1, -1), format=sample_format, layout="mono")
            frame.sample_rate = SAMPLE_RATE
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()
