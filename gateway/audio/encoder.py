"""What every per-request streaming encoder offers the HTTP layer."""

from __future__ import annotations

from typing import Protocol


class EncoderClosedError(RuntimeError):
    """``encode``/``finish`` on an encoder that was finished or closed."""


class StreamEncoder(Protocol):
    """Turns the worker's PCM into one continuous stream of the requested format, as it arrives.

    One instance per request. Call ``encode`` for every upstream chunk (any byte count,
    split samples included), then ``finish`` once at the end; call ``close`` in a
    ``finally`` so native resources are released when the request ends early.
    Concatenating every returned byte string gives one valid stream.
    """

    def encode(self, pcm: bytes) -> bytes:
        """Feed worker PCM; returns the encoded bytes ready now, possibly ``b""``."""
        ...

    def finish(self) -> bytes:
        """Flush the tail of the stream and close the encoder."""
        ...

    def close(self) -> None:
        """Release everything; idempotent, safe at any point (the unflushed tail is dropped)."""
        ...
