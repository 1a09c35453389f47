"""``speed``: time-stretched in the gateway, same pitch, every format, streaming."""

from __future__ import annotations

import math

import pytest

import gateway.audio.factory as factory
from gateway.audio import AudioFormat, open_encoder, validate_speed
from gateway.audio.tempo import atempo_factors

from .signals import chirp_pcm, decode, dominant_hz, encode_all, tone_pcm

INPUT_SECONDS = 2.0
CODEC_PADDING_S = 0.12  # decoded mp3/aac carry encoder priming; see test_encoders


@pytest.fixture(scope="module")
def chirp() -> bytes:
    return chirp_pcm(INPUT_SECONDS)


@pytest.mark.parametrize("fmt", list(AudioFormat))
@pytest.mark.parametrize("speed", [2.0, 0.5])
def test_speed_scales_duration(fmt: AudioFormat, speed: float, chirp: bytes) -> None:
    outputs, tail = encode_all(open_encoder(fmt, speed), chirp)
    decoded = decode(fmt, b"".join(outputs) + tail)
    expected = INPUT_SECONDS / speed
    assert decoded.seconds == pytest.approx(expected, abs=0.05 * expected + CODEC_PADDING_S)
    assert sum(len(out) for out in outputs) > 0  # stretched audio streams before finish()


@pytest.mark.parametrize("speed", [0.25, 4.0, 3.0])
def test_extreme_speeds_chain_atempo(speed: float) -> None:
    outputs, tail = encode_all(open_encoder(AudioFormat.PCM, speed), tone_pcm(2.0, 440.0))
    seconds = len(b"".join(outputs) + tail) / 48_000
    assert seconds == pytest.approx(2.0 / speed, rel=0.05)


@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_pitch_is_unchanged(speed: float) -> None:
    outputs, tail = encode_all(open_encoder(AudioFormat.PCM, speed), tone_pcm(2.0, 440.0))
    decoded = decode(AudioFormat.PCM, b"".join(outputs) + tail)
    assert dominant_hz(decoded.samples, decoded.sample_rate) == pytest.approx(440.0, abs=5.0)


def test_stretched_pcm_stays_sample_aligned() -> None:
    encoder = open_encoder(AudioFormat.PCM, 1.5)
    outputs, tail = encode_all(encoder, chirp_pcm(1.0))
    assert all(len(out) % 2 == 0 for out in [*outputs, tail])


def test_speed_one_never_builds_a_filter_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(speed: float) -> None:
        raise AssertionError("the tempo filter was built at speed 1")

    monkeypatch.setattr(factory, "TempoStretcher", forbidden)
    for fmt in AudioFormat:
        encoder = open_encoder(fmt, 1.0)
        encoder.encode(chirp_pcm(0.1))
        encoder.finish()


@pytest.mark.parametrize("speed", [0.2, 4.01, math.nan, math.inf, 0.0, -1.0])
def test_speed_outside_openai_range_is_rejected(speed: float) -> None:
    with pytest.raises(ValueError, match="speed"):
        validate_speed(speed)
    with pytest.raises(ValueError):
        open_encoder(AudioFormat.MP3, speed)


@pytest.mark.parametrize("speed", [0.25, 0.3, 0.5, 0.9, 1.5, 2.0, 2.5, 4.0])
def test_atempo_chain_stays_in_the_portable_range(speed: float) -> None:
    factors = atempo_factors(speed)
    assert all(0.5 <= factor <= 2.0 for factor in factors)
    assert math.prod(factors) == pytest.approx(speed)
    assert len(factors) == (1 if 0.5 <= speed <= 2.0 else 2)
