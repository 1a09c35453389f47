"""Plain helpers for the workers' PCM (24 kHz mono s16le); no native libraries here."""

from __future__ import annotations

from gateway.types.codec import BYTES_PER_SECOND, CHANNELS, SAMPLE_WIDTH

BYTES_PER_FRAME = CHANNELS * SAMPLE_WIDTH  # one sample for every channel


def pcm_duration_seconds(num_bytes: int) -> float:
    """Seconds of audio in ``num_bytes`` of worker PCM."""
    return num_bytes / BYTES_PER_SECOND


def pcm_bytes_for_seconds(seconds: float) -> int:
    """Bytes of worker PCM that hold ``seconds`` of audio, rounded down to whole frames."""
    frames = int(seconds * BYTES_PER_SECOND) // BYTES_PER_FRAME
    return frames * BYTES_PER_FRAME


class SampleAligner:
    """Cuts a byte stream at whole-sample boundaries, carrying a split sample to the next chunk.

    TCP and HTTP chunking split the worker's stream anywhere, including inside a 2-byte
    sample. Passing that half sample on would shift every later sample by one byte (loud
    noise in an encoder) or make a client's ``frombuffer(dtype=int16)`` on an SSE delta fail.
    """

    __slots__ = ("_carry",)

    def __init__(self) -> None:
        self._carry = b""

    @property
    def pending(self) -> int:
        """Bytes held back until the rest of their sample arrives."""
        return len(self._carry)

    def align(self, chunk: bytes) -> bytes:
        """The longest whole-sample prefix of carry + ``chunk``; the same object when already aligned."""
        if self._carry:
            chunk = self._carry + chunk
            self._carry = b""
        split = len(chunk) % BYTES_PER_FRAME
        if split:
            self._carry = chunk[-split:]
            return chunk[:-split]
        return chunk
