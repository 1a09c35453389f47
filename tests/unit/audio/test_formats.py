import pytest

from gateway.audio import (
    SSE_CONTENT_TYPE,
    STREAMING_HEADERS,
    AudioFormat,
    content_type,
    parse_format,
    response_media_type,
)


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        (AudioFormat.MP3, "audio/mpeg"),
        (AudioFormat.OPUS, "audio/opus"),
        (AudioFormat.AAC, "audio/aac"),
        (AudioFormat.FLAC, "audio/flac"),
        (AudioFormat.WAV, "audio/wav"),
        (AudioFormat.PCM, "audio/pcm"),
    ],
)
def test_content_types(fmt: AudioFormat, expected: str) -> None:
    assert content_type(fmt) == expected
    assert response_media_type(fmt, sse=False) == expected
    assert response_media_type(fmt, sse=True) == SSE_CONTENT_TYPE == "text/event-stream"


def test_the_six_openai_formats_and_nothing_else() -> None:
    assert {f.value for f in AudioFormat} == {"mp3", "opus", "aac", "flac", "wav", "pcm"}


def test_parse_format_is_case_insensitive_and_lists_choices_on_error() -> None:
    assert parse_format(" MP3 ") is AudioFormat.MP3
    with pytest.raises(ValueError, match="mp3, opus, aac, flac, wav, pcm"):
        parse_format("ogg")


def test_streaming_headers_stop_proxy_buffering() -> None:
    assert STREAMING_HEADERS == {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
