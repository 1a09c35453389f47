"""The worker's first chunk (one 40 ms frame, then a ~250 ms hole) yields audio at once,
in every format and speed, and the stream stays correctly timed afterwards."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.audio import AudioFormat, StreamEncoder, open_encoder
from gateway.types.codec import BYTES_PER_FRAME, FRAME_SECONDS, SAMPLES_PER_FRAME

from .signals import chirp_pcm, decode

SPEEDS = (1.0, 0.8, 1.5)
SECONDS = 2.0
# The silence the early start leaves behind the first chunk, as the decoder counts it (in
# whole packets): within one 40 ms frame, or one packet of the codec when that is longer
# (AAC: 1024 samples; two after a first piece shorter than the worker's, which this 2 s
# clip's length happens not to show); mp3 rounds up to one or two of its 24 ms frames.
EARLY_ALLOWANCE_S = {AudioFormat.AAC: 1024 / 24_000, AudioFormat.MP3: 2 * 576 / 24_000}


def _late_encoder(fmt: AudioFormat, speed: float) -> StreamEncoder:
    """The same encoder without the early start: what the stream was before."""
    return open_encoder(fmt, speed, early_start=False)


def _worker_chunks(pcm: bytes) -> list[bytes]:
    """The worker's pattern: one codec frame, then 1 s chunks."""
    first = BYTES_PER_FRAME
    return [pcm[:first]] + [pcm[i : i + 48_000] for i in range(first, len(pcm), 48_000)]


def _stream(encoder: StreamEncoder, chunks: list[bytes]) -> tuple[bytes, bytes]:
    """(bytes out after the first chunk, the whole stream)."""
    try:
        first = encoder.encode(chunks[0])
        rest = b"".join(encoder.encode(chunk) for chunk in chunks[1:])
        return first, first + rest + encoder.finish()
    finally:
        encoder.close()


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_first_chunk_alone_yields_decodable_audio(fmt: AudioFormat, speed: float) -> None:
    encoder = open_encoder(fmt, speed)
    try:
        first = encoder.encode(chirp_pcm(FRAME_SECONDS)[:BYTES_PER_FRAME])  # 960 samples, nothing after
    finally:
        encoder.close()
    decoded = decode(fmt, first)
    # Most of the first 40 ms is playable (opus: its 20 ms packets minus the codec's pre-skip).
    assert decoded.seconds >= 0.5 * FRAME_SECONDS / speed


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_decoded_length_within_one_frame_of_the_stream_without_early_start(fmt: AudioFormat, speed: float) -> None:
    chunks = _worker_chunks(chirp_pcm(SECONDS))
    _, early = _stream(open_encoder(fmt, speed), chunks)
    _, late = _stream(_late_encoder(fmt, speed), chunks)
    added = decode(fmt, early).seconds - decode(fmt, late).seconds
    assert 0.0 <= added <= EARLY_ALLOWANCE_S.get(fmt, FRAME_SECONDS) + 1e-9


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_decoded_length_is_pcm_length_plus_the_codec_own_padding(fmt: AudioFormat, speed: float) -> None:
    chunks = _worker_chunks(chirp_pcm(SECONDS))
    _, pcm = _stream(open_encoder(AudioFormat.PCM, speed), chunks)
    _, stream = _stream(open_encoder(fmt, speed), chunks)
    # The chirp ends without quiet, so nothing is taken back (test_decoded_length): mp3/aac
    # decoders play the priming and last-frame padding (mp3 at most 1105 samples + < 576, less
    # with its Info frame; aac: 1024 + < 1024); the early start adds < 1 frame.
    own_padding_s = {AudioFormat.MP3: (1105 + 576) / 24_000, AudioFormat.AAC: 2048 / 24_000}.get(fmt, 0.0)
    added = decode(fmt, stream).seconds - decode(AudioFormat.PCM, pcm).seconds
    assert 0.0 <= added <= own_padding_s + EARLY_ALLOWANCE_S.get(fmt, FRAME_SECONDS) + 1e-9


@pytest.mark.parametrize("speed", (0.8, 1.5, 0.5, 2.5))
def test_stretched_stream_has_no_step_at_the_first_chunk_seam(speed: float) -> None:
    chunks = _worker_chunks(chirp_pcm(SECONDS))
    _, early = _stream(open_encoder(AudioFormat.PCM, speed), chunks)
    _, late = _stream(_late_encoder(AudioFormat.PCM, speed), chunks)
    assert len(early) == len(late)  # exactly input / speed, like the filter alone
    a = np.frombuffer(early, dtype="<i2").astype(np.float64)
    b = np.frombuffer(late, dtype="<i2").astype(np.float64)
    seam = round(SAMPLES_PER_FRAME / speed)
    steps = np.abs(np.diff(a[max(0, seam - 400) : seam + 400]))
    assert steps.max() <= 1.5 * np.abs(np.diff(b)).max()  # no click where the two filters meet
    assert np.array_equal(a[seam + 2_000 :], b[seam + 2_000 :])  # and the same stream after it


def test_lossless_flac_keeps_every_sample_of_the_worker_pattern() -> None:
    pcm = chirp_pcm(SECONDS)
    _, stream = _stream(open_encoder(AudioFormat.FLAC), _worker_chunks(pcm))
    assert decode(AudioFormat.FLAC, stream).samples.astype("<i2").tobytes() == pcm
