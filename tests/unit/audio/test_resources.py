"""Native codec, muxer and filter objects must go away when a request ends, however it ends."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import av
import pytest

from gateway.audio import AudioFormat, open_encoder

from .signals import chirp_pcm

_NATIVE_TYPES = (
    av.container.OutputContainer,
    av.audio.stream.AudioStream,
    av.audio.codeccontext.AudioCodecContext,
    av.filter.Graph,
)


def _live_native_objects() -> int:
    return sum(isinstance(obj, _NATIVE_TYPES) for obj in gc.get_objects())


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    """Only reference counting frees objects here: a leak cannot hide behind a later gc run."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("fmt", list(AudioFormat))
@pytest.mark.parametrize("speed", [1.0, 2.0])
@pytest.mark.parametrize("ending", ["close", "finish"])
def test_request_end_releases_native_objects(
    fmt: AudioFormat, speed: float, ending: str, no_cycle_collector: None
) -> None:
    before = _live_native_objects()
    encoder = open_encoder(fmt, speed)
    encoder.encode(chirp_pcm(0.3))
    getattr(encoder, ending)()
    encoder.close()
    # The encoder object itself may outlive the request (a suspended response generator
    # holds it); what it owned natively must not.
    assert _live_native_objects() == before
