"""Every format: irregular PCM chunks in, one continuous decodable stream out."""

from __future__ import annotations

import io
import struct

import av
import pytest

from gateway.audio import AudioFormat, EncoderClosedError, open_encoder
from gateway.types.codec import SAMPLE_RATE

from .signals import chirp_pcm, decode, encode_all, tone_pcm

INPUT_SECONDS = 3.0
# Decoded length may exceed the input by the codec's priming and last-frame padding
# (mp3 ~1 frame + what its Info frame leaves of LAME's delay, AAC 1024+ samples) and by the
# silence behind the first chunk that gets its packets out early (< 1-2 frames): the chirp
# ends without quiet to take them back from (test_decoded_length).
DURATION_TOLERANCE_S = {
    AudioFormat.MP3: 0.12,
    AudioFormat.AAC: 0.15,
    AudioFormat.OPUS: 0.03,
    AudioFormat.FLAC: 0.0,
    AudioFormat.WAV: 0.0,
    AudioFormat.PCM: 0.0,
}
CODEC_FORMATS = (AudioFormat.MP3, AudioFormat.AAC, AudioFormat.OPUS, AudioFormat.FLAC)


@pytest.fixture(scope="module")
def chirp() -> bytes:
    return chirp_pcm(INPUT_SECONDS)


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_stream_decodes_to_the_input_audio(fmt: AudioFormat, chirp: bytes) -> None:
    outputs, tail = encode_all(open_encoder(fmt), chirp)
    decoded = decode(fmt, b"".join(outputs) + tail)

    assert decoded.channels == 1
    if fmt is AudioFormat.OPUS:
        assert decoded.sample_rate in (24_000, 48_000)  # Opus decoders run at 48 kHz
    else:
        assert decoded.sample_rate == SAMPLE_RATE
    assert decoded.seconds == pytest.approx(INPUT_SECONDS, abs=DURATION_TOLERANCE_S[fmt] + 1e-9)
    assert decoded.seconds >= INPUT_SECONDS - 0.001  # never loses the end of the speech


@pytest.mark.parametrize("fmt", [AudioFormat.FLAC, AudioFormat.WAV, AudioFormat.PCM])
def test_lossless_formats_keep_every_sample(fmt: AudioFormat, chirp: bytes) -> None:
    outputs, tail = encode_all(open_encoder(fmt), chirp)
    decoded = decode(fmt, b"".join(outputs) + tail)
    assert decoded.samples.astype("<i2").tobytes() == chirp


def test_pcm_is_the_input_bytes_unchanged(chirp: bytes) -> None:
    outputs, tail = encode_all(open_encoder(AudioFormat.PCM), chirp)
    assert b"".join(outputs) + tail == chirp
    assert all(len(out) % 2 == 0 for out in outputs)  # whole samples in every chunk


def test_pcm_hands_back_aligned_chunks_as_is() -> None:
    encoder = open_encoder(AudioFormat.PCM)
    chunk = b"\x01\x02" * 960
    assert encoder.encode(chunk) is chunk


def test_wav_has_one_streaming_header_then_the_pcm(chirp: bytes) -> None:
    outputs, tail = encode_all(open_encoder(AudioFormat.WAV), chirp)
    stream = b"".join(outputs) + tail
    expected_header = (
        b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE"
        + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, 24_000, 48_000, 2, 16)
        + b"data" + struct.pack("<I", 0xFFFFFFFF)
    )  # fmt: skip
    assert outputs[0].startswith(expected_header)
    assert stream == expected_header + chirp
    assert stream.count(b"RIFF") == 1 and stream.count(b"WAVE") == 1


def test_wav_without_audio_is_still_a_header() -> None:
    encoder = open_encoder(AudioFormat.WAV)
    assert len(encoder.finish()) == 44


def test_mp3_opens_with_an_info_frame_that_claims_no_length(chirp: bytes) -> None:
    outputs, tail = encode_all(open_encoder(AudioFormat.MP3), chirp)
    stream = b"".join(outputs) + tail
    assert stream[:2] == b"\xff\xf3"  # no ID3 tag: an MPEG-2 Layer III frame sync, no CRC
    assert stream[4:13] == bytes(9)  # empty side info: the frame holds no audio
    assert stream[13:17] == b"Info"  # CBR
    assert stream[17:21] == bytes(4)  # no frame count, byte count, seek table or quality
    delay = int.from_bytes(stream[13 + 29 : 13 + 32], "big")  # LAME extension: delay, padding
    assert (delay >> 12, delay & 0xFFF) == (576, 0)  # LAME's encoder delay; end padding unknown
    assert b"Xing" not in stream[:2_000] and stream.count(b"Info", 0, 2_000) == 1
    with av.open(io.BytesIO(stream), format="mp3") as container:
        assert container.streams.audio[0].metadata.get("encoder", "").startswith("Lavc")  # tag CRC valid


def test_aac_is_adts_framed(chirp: bytes) -> None:
    outputs, _ = encode_all(open_encoder(AudioFormat.AAC), chirp)
    stream = b"".join(outputs)
    assert stream[0] == 0xFF and stream[1] & 0xF6 == 0xF0  # ADTS sync word, layer 0


@pytest.mark.parametrize("fmt", CODEC_FORMATS)
def test_audio_leaves_before_finish(fmt: AudioFormat) -> None:
    """Given 1.5 s of input, most of it must be decodable before the stream is finished."""
    encoder = open_encoder(fmt)
    try:
        early = b"".join(encoder.encode(chunk) for chunk in _worker_like_chunks(chirp_pcm(1.5)))
    finally:
        encoder.close()
    assert decode(fmt, early).seconds >= 0.9


@pytest.mark.parametrize("fmt", [AudioFormat.OPUS, AudioFormat.FLAC])
def test_first_40ms_chunk_already_yields_audio(fmt: AudioFormat) -> None:
    encoder = open_encoder(fmt)
    try:
        first = encoder.encode(tone_pcm(0.04, 440.0))  # the worker's first chunk: 1 codec frame
    finally:
        encoder.close()
    assert decode(fmt, first).seconds > 0


@pytest.mark.parametrize("fmt", list(AudioFormat))
@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_close_after_partial_use_is_safe_and_idempotent(fmt: AudioFormat, speed: float) -> None:
    encoder = open_encoder(fmt, speed)
    encoder.encode(chirp_pcm(0.5)[:-1])  # ends inside a sample
    encoder.close()
    encoder.close()
    with pytest.raises(EncoderClosedError):
        encoder.encode(b"\x00\x00")
    with pytest.raises(EncoderClosedError):
        encoder.finish()


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_finish_closes_the_encoder(fmt: AudioFormat) -> None:
    encoder = open_encoder(fmt)
    encoder.encode(chirp_pcm(0.2))
    encoder.finish()
    encoder.close()  # the usual `finally` after a finished stream
    with pytest.raises(EncoderClosedError):
        encoder.finish()


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_finish_without_audio_does_not_fail(fmt: AudioFormat) -> None:
    assert isinstance(open_encoder(fmt).finish(), bytes)


def test_unknown_format_is_rejected() -> None:
    with pytest.raises(ValueError):
        open_encoder("ogg")  # type: ignore[arg-type]


def _worker_like_chunks(pcm: bytes) -> list[bytes]:
    """The worker's pattern: 40 ms first, then 1 s chunks (here split at an odd byte)."""
    first = 960 * 2
    rest = pcm[first:]
    return [pcm[:first], rest[:24_001], rest[24_001:48_000], rest[48_000:]]
