"""mp3 and aac decode (with PyAV, as a client does) to the worker's length: what a decoder
plays on top of the speech (priming, last-packet padding, the early start's pause) is taken
back from the quiet the speech ends in, and never from the speech."""

from __future__ import annotations

import av
import numpy as np
import pytest

from gateway.audio import AudioFormat, open_encoder
from gateway.types.codec import FRAME_SECONDS, SAMPLE_RATE

from .signals import chirp_pcm, decode, quiet_pcm, tone_pcm, worker_chunks

SPEEDS = (1.0, 0.8, 1.5)
LOSSY = (AudioFormat.MP3, AudioFormat.AAC)
PACKET_SAMPLES = {AudioFormat.MP3: 576, AudioFormat.AAC: 1024}
BOUND_SAMPLES = round(FRAME_SECONDS * SAMPLE_RATE)  # one codec frame of the model: 40 ms
TAIL_SECONDS = 0.3  # TTS clips end in a few hundred ms of quiet; the emulator's in ~350 ms


def _stream(fmt: AudioFormat, speed: float, pcm: bytes, early_start: bool = True) -> bytes:
    encoder = open_encoder(fmt, speed, early_start=early_start)
    try:
        out = b"".join(encoder.encode(chunk) for chunk in worker_chunks(pcm))
        return out + encoder.finish()
    finally:
        encoder.close()


def _over_pcm(fmt: AudioFormat, speed: float, pcm: bytes, early_start: bool = True) -> int:
    """Decoded samples over the pcm stream's at the same speed."""
    reference = _stream(AudioFormat.PCM, speed, pcm)
    return len(decode(fmt, _stream(fmt, speed, pcm, early_start)).samples) - len(reference) // 2


@pytest.mark.parametrize("seconds", (2.0, 2.013, 1.234, 3.37))
@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize("fmt", LOSSY)
def test_decoded_length_within_half_a_packet_of_pcm(fmt: AudioFormat, speed: float, seconds: float) -> None:
    pcm = chirp_pcm(seconds) + quiet_pcm(TAIL_SECONDS)
    over = _over_pcm(fmt, speed, pcm)
    assert abs(over) <= PACKET_SAMPLES[fmt] // 2 <= BOUND_SAMPLES


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize("fmt", LOSSY)
def test_whole_files_too(fmt: AudioFormat, speed: float) -> None:
    pcm = chirp_pcm(2.0) + quiet_pcm(TAIL_SECONDS)
    assert abs(_over_pcm(fmt, speed, pcm, early_start=False)) <= PACKET_SAMPLES[fmt] // 2


def _aligned_error_db(decoded: np.ndarray, reference: np.ndarray, start: int, stop: int) -> float:
    """Signal over error (dB) of ``reference[start:stop]`` against where it lies in ``decoded``."""
    part = reference[start:stop]
    search = decoded[start : stop + 6_000]  # the stream holds priming and the early start's pause
    lags = np.correlate(search, part, mode="valid")
    at = start + int(np.argmax(lags))
    got = decoded[at : at + len(part)]
    scale = np.dot(got, part) / np.dot(got, got)  # decoders may return float or int samples
    return float(10 * np.log10(np.sum(part**2) / np.sum((part - scale * got) ** 2)))


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize("fmt", LOSSY)
def test_the_speech_is_all_there(fmt: AudioFormat, speed: float) -> None:
    pcm = chirp_pcm(2.0) + quiet_pcm(TAIL_SECONDS)
    reference = np.frombuffer(_stream(AudioFormat.PCM, speed, pcm), dtype="<i2").astype(np.float64)
    decoded = decode(fmt, _stream(fmt, speed, pcm)).samples.astype(np.float64)
    speech_end = round(2.0 * SAMPLE_RATE / speed)
    # After the first chunk's pause, to the last sample of speech: as close as the codec gets.
    assert _aligned_error_db(decoded, reference, round(0.1 * SAMPLE_RATE / speed), speech_end) >= 15.0
    # Its last 50 ms in particular: the quiet was left out behind them, not from them.
    assert _aligned_error_db(decoded, reference, speech_end - 1_200, speech_end) >= 15.0


@pytest.mark.parametrize("fmt", LOSSY)
def test_a_pause_between_words_is_kept(fmt: AudioFormat) -> None:
    # The pause crosses the worker's chunk boundary (1.04 s): held there, sent with the next chunk.
    pcm = chirp_pcm(1.0) + quiet_pcm(0.3) + chirp_pcm(1.0)
    assert _over_pcm(fmt, 1.0, pcm) >= 0  # nothing left out: the clip ends in speech


@pytest.mark.parametrize("fmt", LOSSY)
def test_soft_sound_at_the_end_is_not_quiet(fmt: AudioFormat) -> None:
    pcm = chirp_pcm(1.0) + bytes(np.frombuffer(tone_pcm(0.3, 440.0), dtype="<i2") // 16)  # about -30 dBFS
    assert _over_pcm(fmt, 1.0, pcm) >= 0


@pytest.mark.parametrize("fmt", LOSSY)
def test_a_clip_without_quiet_at_the_end_keeps_every_sample(fmt: AudioFormat) -> None:
    assert _over_pcm(fmt, 1.0, chirp_pcm(2.0)) >= 0


def test_mp3_info_frame_is_one_silent_frame_to_a_decoder_that_ignores_it() -> None:
    pcm = chirp_pcm(1.0) + quiet_pcm(TAIL_SECONDS)
    stream = _stream(AudioFormat.MP3, 1.0, pcm)
    codec = av.CodecContext.create("mp3", "r")  # the bare decoder: no demuxer reads the tag
    frames = [frame for packet in codec.parse(stream) for frame in codec.decode(packet)]
    frames += codec.decode(None)
    samples = np.concatenate([frame.to_ndarray().reshape(-1) for frame in frames]).astype(np.float64)
    assert frames[0].samples == 576 and not np.any(frames[0].to_ndarray())  # the Info frame: silence
    reference = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    assert _aligned_error_db(samples, reference, 2_400, SAMPLE_RATE) >= 15.0  # then the speech
