"""``open_encoder``: the one way the HTTP layer gets a per-request encoder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from types import MappingProxyType

from gateway.audio.codec import CODEC_PROFILES, CodecStreamEncoder
from gateway.audio.encoder import StreamEncoder
from gateway.audio.formats import AudioFormat
from gateway.audio.passthrough import PcmPassthroughEncoder, WavStreamEncoder
from gateway.audio.resample import resampled_encoder
from gateway.audio.tempo import TempoStretcher, TimeStretchedEncoder, validate_speed
from gateway.types.codec import SAMPLE_RATE

def _passthrough(make: Callable[[], StreamEncoder]) -> Callable[[bool], StreamEncoder]:
    return lambda early_start: make()  # pcm and wav: the first chunk is already audio


_ENCODERS: Mapping[AudioFormat, Callable[[bool], StreamEncoder]] = MappingProxyType(
    {
        AudioFormat.PCM: _passthrough(PcmPassthroughEncoder),
        AudioFormat.WAV: _passthrough(WavStreamEncoder),
        **{fmt: partial(CodecStreamEncoder, profile) for fmt, profile in CODEC_PROFILES.items()},
    }
)


def open_encoder(
    fmt: AudioFormat, speed: float = 1.0, early_start: bool = True, sample_rate: int | None = None
) -> StreamEncoder:
    """A fresh streaming encoder from worker PCM to ``fmt``, time-stretched when ``speed`` != 1
    and resampled when ``sample_rate`` is another rate than the workers'.

    ``early_start`` (streamed responses) gets the first audio out with the worker's first
    chunk (``codec.EarlyStart``, ``tempo``); off for audio sent as one file at the end, where
    waiting costs nothing and the mp3/aac/opus padding would only add a few ms of silence.
    Raises ``ValueError`` for an unknown format, a speed outside 0.25..4.0 or a rate the
    format cannot carry. The caller owns the encoder: ``finish()`` at the end, ``close()``
    in a ``finally``.
    """
    speed = validate_speed(speed)
    fmt = AudioFormat(fmt)
    if sample_rate is None or sample_rate == SAMPLE_RATE:
        encoder = _ENCODERS[fmt](early_start)
    else:
        encoder = resampled_encoder(fmt, sample_rate)
    if speed == 1.0:
        return encoder  # the common case never builds a filter graph
    try:
        return TimeStretchedEncoder(encoder, TempoStretcher(speed, early_start))
    except BaseException:
        encoder.close()
        raise
