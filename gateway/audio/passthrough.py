"""``pcm`` and ``wav``: the worker's PCM as it is, the latter behind one streaming RIFF header.

This is the voice-agent hot path, so each call is a couple of attribute reads and, in the
common aligned case, hands back the very bytes object it was given.
"""

from __future__ import annotations

import struct

from gateway.audio.encoder import EncoderClosedError
from gateway.audio.pcm import BYTES_PER_FRAME, SampleAligner
from gateway.types.codec import CHANNELS, SAMPLE_RATE, SAMPLE_WIDTH

_UNKNOWN_SIZE = 0xFFFFFFFF  # a live stream's length is unknown when the header goes out
_WAVE_FORMAT_PCM = 1


def wav_stream_header() -> bytes:
    """The 44-byte RIFF/WAVE header of an open-ended stream of the workers' PCM."""
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        _UNKNOWN_SIZE,
        b"WAVE",
        b"fmt ",
        16,  # size of the PCM fmt chunk
        _WAVE_FORMAT_PCM,
        CHANNELS,
        SAMPLE_RATE,
        SAMPLE_RATE * BYTES_PER_FRAME,  # byte rate
        BYTES_PER_FRAME,  # block align
        SAMPLE_WIDTH * 8,  # bits per sample
        b"data",
        _UNKNOWN_SIZE,
    )


WAV_STREAM_HEADER = wav_stream_header()


class PcmPassthroughEncoder:
    """Raw PCM out, cut at whole samples (a trailing half sample at the very end is dropped)."""

    __slots__ = ("_align", "_closed")

    def __init__(self) -> None:
        self._align = SampleAligner().align
        self._closed = False

    def encode(self, pcm: bytes) -> bytes:
        if self._closed:
            raise EncoderClosedError("encode() after the encoder was finished or closed")
        return self._align(pcm)

    def finish(self) -> bytes:
        if self._closed:
            raise EncoderClosedError("finish() after the encoder was finished or closed")
        self._closed = True
        return b""

    def close(self) -> None:
        self._closed = True


class WavStreamEncoder:
    """One streaming WAV header in front of the first output, then PCM passthrough.

    A header per chunk would make players stop or click at every seam, so it goes out once.
    """

    __slots__ = ("_align", "_header", "_closed")

    def __init__(self) -> None:
        self._align = SampleAligner().align
        self._header = WAV_STREAM_HEADER  # emptied once sent
        self._closed = False

    def encode(self, pcm: bytes) -> bytes:
        if self._closed:
            raise EncoderClosedError("encode() after the encoder was finished or closed")
        if self._header:
            out = self._header + self._align(pcm)
            self._header = b""
            return out
        return self._align(pcm)

    def finish(self) -> bytes:
        if self._closed:
            raise EncoderClosedError("finish() after the encoder was finished or closed")
        self._closed = True
        header, self._header = self._header, b""
        return header  # a response with no audio is still a valid (empty) WAV stream

    def close(self) -> None:
        self._closed = True
