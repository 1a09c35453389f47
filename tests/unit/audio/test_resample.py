"""``sample_rate``: every format comes out at the asked rate, as long as the worker's audio."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from gateway.audio.factory import open_encoder
from gateway.audio.formats import AudioFormat
from gateway.audio.resample import resampled_encoder, supported_sample_rates, wav_header_at

ONE_SECOND = (np.sin(np.arange(24_000) / 24_000 * 2 * np.pi * 220) * 8000).astype("<i2").tobytes()


def encode_in_odd_pieces(fmt: AudioFormat, rate: int, speed: float = 1.0) -> bytes:
    encoder = open_encoder(fmt, speed, sample_rate=rate)
    # 4801 bytes: pieces split inside a sample, as HTTP chunking does.
    out = b"".join(encoder.encode(ONE_SECOND[i : i + 4801]) for i in range(0, len(ONE_SECOND), 4801))
    return out + encoder.finish()


def decoded(data: bytes) -> tuple[int, float]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return stream.rate, samples / stream.rate


@pytest.mark.parametrize("rate", [8_000, 16_000, 22_050, 44_100, 48_000])
def test_pcm_comes_out_at_the_rate_and_the_length(rate: int) -> None:
    pcm = encode_in_odd_pieces(AudioFormat.PCM, rate)
    assert abs(len(pcm) / 2 / rate - 1.0) <= 2 / 1000


@pytest.mark.parametrize("fmt", [AudioFormat.WAV, AudioFormat.FLAC, AudioFormat.MP3, AudioFormat.AAC])
def test_files_say_the_rate_and_last_as_long(fmt: AudioFormat) -> None:
    rate, seconds = decoded(encode_in_odd_pieces(fmt, 16_000))
    assert rate == 16_000
    assert abs(seconds - 1.0) <= 0.1


def test_opus_is_coded_at_the_rate_and_lasts_as_long() -> None:
    _, seconds = decoded(encode_in_odd_pieces(AudioFormat.OPUS, 16_000))
    assert abs(seconds - 1.0) <= 0.1


def test_speed_and_rate_together() -> None:
    pcm = encode_in_odd_pieces(AudioFormat.PCM, 16_000, speed=2.0)
    assert abs(len(pcm) / 2 / 16_000 - 0.5) <= 0.02


def test_the_wav_header_names_the_rate() -> None:
    header = wav_header_at(16_000)
    assert int.from_bytes(header[24:28], "little") == 16_000
    assert int.from_bytes(header[28:32], "little") == 32_000


def test_rates_a_format_cannot_carry_are_refused() -> None:
    assert 22_050 not in supported_sample_rates(AudioFormat.OPUS)
    with pytest.raises(ValueError):
        resampled_encoder(AudioFormat.OPUS, 22_050)
    with pytest.raises(ValueError):
        resampled_encoder(AudioFormat.PCM, 24_000)
