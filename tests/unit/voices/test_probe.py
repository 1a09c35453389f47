import pytest

from gateway.voices.errors import VoiceError
from gateway.voices.probe import (
    AAC,
    FLAC,
    MP3,
    MP4,
    OGG,
    WAV,
    WEBM,
    probe_audio,
    sniff_format,
    validate_reference_audio,
)
from tests.unit.voices.samples import encoded, wav_bytes


def test_wav_is_measured_by_decoding():
    info = probe_audio(wav_bytes(2.5))
    assert info.format is WAV
    assert info.duration_s == pytest.approx(2.5, abs=0.01)
    assert (info.sample_rate, info.channels) == (24_000, 1)


@pytest.mark.parametrize(
    "container, fmt",
    [("mp3", MP3), ("flac", FLAC), ("ogg", OGG), ("webm", WEBM), ("ipod", MP4), ("adts", AAC)],
)
def test_common_upload_formats_are_recognised(container, fmt):
    data = encoded(container, 2.0)
    assert sniff_format(data) is fmt
    info = probe_audio(data)
    assert info.format is fmt
    assert info.duration_s == pytest.approx(2.0, abs=0.15)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"hello, this is not audio at all" * 10,
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 100,
        b"%PDF-1.7\n" + b"x" * 100,
        b"<html><body>voice</body></html>",
    ],
)
def test_non_audio_is_refused_with_a_clear_error(data):
    with pytest.raises(VoiceError) as err:
        probe_audio(data)
    assert err.value.status == 400
    assert err.value.param == "audio_sample"
    assert "not a recognised audio file" in err.value.message


def test_audio_magic_over_garbage_is_refused():
    forged = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\xff" * 200
    with pytest.raises(VoiceError, match="could not be decoded|no decodable audio"):
        probe_audio(forged)


def test_truncated_header_only_wav_has_no_audio():
    with pytest.raises(VoiceError):
        probe_audio(wav_bytes(2.0)[:44])


@pytest.mark.parametrize("seconds, ok", [(0.5, False), (1.0, True), (29.0, True), (31.0, False)])
def test_reference_duration_window(seconds, ok):
    data = wav_bytes(seconds, rate=8000)
    if ok:
        assert validate_reference_audio(data, 1.0, 30.0).duration_s == pytest.approx(seconds, abs=0.01)
    else:
        with pytest.raises(VoiceError, match="1-30 s"):
            validate_reference_audio(data, 1.0, 30.0)


def test_decoding_stops_past_the_limit():
    info = probe_audio(wav_bytes(20.0, rate=8000), stop_after_s=3.0)
    assert 3.0 < info.duration_s < 5.0
