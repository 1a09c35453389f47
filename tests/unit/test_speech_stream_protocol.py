"""The session config and the per-sentence request of ``/v1/audio/speech/stream``.

REF:n = line n of the speech-stream reference notes; AUD = vllm-omni 0.30.0
``entrypoints/openai/protocol/audio.py``, SSS = ``serving_speech_stream.py``.
"""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from gateway.worker.session_protocol import (
    StreamingSpeechSessionConfig,
    model_not_found,
    sentence_request,
    unknown_voice,
)


def test_defaults() -> None:
    # REF:28–38 (AUD:556–638)
    config = StreamingSpeechSessionConfig()
    assert config.response_format == "wav" and config.speed == 1.0 and config.split_granularity == "none"
    assert config.stream_audio is False and config.word_timestamps is False
    assert config.voice is None and config.model is None and config.seed is None


def test_unknown_keys_are_ignored_and_speaker_is_an_alias() -> None:
    # REF:28, REF:30
    config = StreamingSpeechSessionConfig(speaker="ada", sample_rate=8000, references=[], extra_params={})  # type: ignore[call-arg]
    assert config.voice == "ada"
    assert StreamingSpeechSessionConfig(voice="bo").voice == "bo"


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"voice": {"id": "ada"}}, "Input should be a valid string"),
        ({"ref_audio": ["a", "b"]}, "Input should be a valid string"),
        ({"response_format": "aac"}, "Input should be 'wav', 'pcm', 'flac', 'mp3' or 'opus'"),
        ({"speed": 0.2}, "greater than or equal to 0.25"),
        ({"max_new_tokens": 0}, "greater than or equal to 1"),
        ({"initial_codec_chunk_frames": -1}, "greater than or equal to 0"),
        ({"seed": 2**63}, "less than or equal to 9223372036854775807"),
        ({"speaker_embedding": [0.0] * 8193}, "at most 8192 items"),
        ({"split_granularity": "paragraph"}, "Input should be 'none', 'sentence' or 'clause'"),
        (
            {"stream_audio": True, "response_format": "wav"},
            "WebSocket streaming audio (stream_audio=true) requires response_format='pcm'. Got response_format='wav'.",
        ),
        (
            {"stream_audio": True, "response_format": "pcm", "speed": 2.0},
            "WebSocket stream_audio=true currently requires speed=1.0; native speed control is only available "
            "through HTTP streaming.",
        ),
    ],
)
def test_refusals_carry_pydantics_text(fields: dict[str, object], detail: str) -> None:
    # REF:31–41 (AUD:556–637); the class name leads the text the client gets (SSS:262–264).
    with pytest.raises(ValidationError) as caught:
        StreamingSpeechSessionConfig(**fields)  # type: ignore[arg-type]
    text = str(caught.value)
    assert text.startswith("1 validation error for StreamingSpeechSessionConfig")
    assert detail in text


def test_stream_audio_takes_a_null_speed_as_one() -> None:
    # AUD:630–632
    assert StreamingSpeechSessionConfig(stream_audio=True, response_format="pcm", speed=None).speed == 1.0
    assert StreamingSpeechSessionConfig(speed=None).speed is None


def test_a_config_can_pass_and_still_fail_to_build_a_sentence_request() -> None:
    # REF:42 (SSS:311–330, AUD:321–325)
    both = StreamingSpeechSessionConfig(ref_audio="https://example.invalid/a.wav", speaker_embedding=[0.5])
    with pytest.raises(ValidationError) as caught:
        sentence_request(both, "Hello.")
    text = str(caught.value)
    assert text.startswith("1 validation error for OpenAICreateSpeechRequest")
    assert "'speaker_embedding' and 'ref_audio' are mutually exclusive" in text
    # JSON's NaN (Python's json module accepts it) passes the config and fails the request.
    with pytest.raises(ValidationError, match="must be finite"):
        sentence_request(StreamingSpeechSessionConfig(speaker_embedding=[math.nan]), "Hello.")


def test_a_sentence_request_takes_the_configs_fields() -> None:
    config = StreamingSpeechSessionConfig(voice="ada", response_format="pcm", stream_audio=True, seed=7, max_new_tokens=99)
    request = sentence_request(config, "Hello.")
    assert (request.input, request.voice, request.response_format, request.stream) == ("Hello.", "ada", "pcm", True)
    assert (request.seed, request.max_new_tokens, request.speed) == (7, 99, 1.0)


def test_error_texts() -> None:
    # REF:29 (SSS:266–270): the str() of vLLM's ErrorResponse; quotes follow Python's repr.
    assert model_not_found("x") == (
        "error=ErrorInfo(message='The model `x` does not exist.', type='NotFoundError', param='model', code=404)"
    )
    assert model_not_found("it's") == (
        "error=ErrorInfo(message=\"The model `it's` does not exist.\", type='NotFoundError', param='model', code=404)"
    )
    # REF:56 (SS:749–781)
    assert unknown_voice("Bob") == (
        "Unknown voice 'Bob'. Higgs-Audio V3 has no built-in speakers. "
        "Upload a voice first via POST /v1/audio/voices, or use ref_audio + ref_text."
    )
