"""The OpenAI request contract: every client mistake is a 400 that names the field."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.config import load_config
from gateway.errors import GatewayError
from gateway.api.speech_request import parse_speech_request
from gateway.audio.formats import AudioFormat
from gateway.security.ref_audio import RefAudioPolicy
from gateway.voices.owners import ADMIN
from gateway.voices.store import VoiceStore
from gateway.worker_payload import WorkerPayloads, max_new_tokens_limit

VALID = {"model": "tts-1", "input": "Hello there.", "voice": "alloy"}


def body(**changes: object) -> bytes:
    document = {**VALID, **changes}
    return orjson.dumps({k: v for k, v in document.items() if v is not ...})


def test_defaults_follow_openai() -> None:
    speech = parse_speech_request(body())
    assert speech.response_format is AudioFormat.MP3
    assert speech.speed == 1.0
    assert speech.stream_format is None and speech.delivery() == "audio"


@pytest.mark.parametrize(
    ("raw", "param", "code"),
    [
        (b"", None, "invalid_json"),
        (b"{not json", None, "invalid_json"),
        (b"[1, 2]", None, "invalid_json"),
        (body(input=...), "input", "missing_required_parameter"),
        (body(input="   "), "input", "invalid_value"),
        (body(input="x" * 4097), "input", "invalid_value"),
        (body(speed=5), "speed", "invalid_value"),
        (body(speed=0.1), "speed", "invalid_value"),
        (body(speed="fast"), "speed", "invalid_value"),
        (body(response_format="ogg"), "response_format", "invalid_value"),
        (body(stream_format="chunks"), "stream_format", "invalid_value"),
        (body(voice=7), "voice", "invalid_value"),
        (body(voice={"name": "x"}), "voice", "invalid_value"),
        (body(seed=2**63), "seed", "invalid_value"),
        (body(max_new_tokens=0), "max_new_tokens", "invalid_value"),
        (body(max_new_tokens=7), "max_new_tokens", "invalid_value"),
        (body(max_new_tokens=2**63), "max_new_tokens", "invalid_value"),
        (body(sample_rate=16001), "sample_rate", "invalid_value"),
        (body(temperature=0.3), "temperature", "unknown_parameter"),
        (body(input=["a", "b"]), "input", "invalid_value"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(raw: bytes, param: str | None, code: str) -> None:
    with pytest.raises(GatewayError) as caught:
        parse_speech_request(raw)
    error = caught.value
    assert error.status == 400
    assert error.param == param
    assert error.code == code
    assert error.envelope()["error"]["type"] == "invalid_request_error"
    assert error.message


def test_model_and_voice_may_be_left_out_as_on_the_worker() -> None:
    # OpenAI requires both; the released worker takes its served model and default voice.
    speech = parse_speech_request(orjson.dumps({"input": "Hello there."}))
    assert (speech.model, speech.voice_name) == (None, None)


def payloads(tmp_path: Path) -> WorkerPayloads:
    config = load_config(overrides={"data_dir": str(tmp_path), "voices": {"aliases": {"narrator": None}}})
    return WorkerPayloads(config.models, config.voices, VoiceStore.in_data_dir(tmp_path), RefAudioPolicy(config.auth))


async def test_voice_object_and_extensions_reach_the_worker(tmp_path: Path) -> None:
    speech = parse_speech_request(
        body(voice={"id": "narrator"}, seed=7, max_new_tokens=100, ref_text="hi", language="en", instructions="calm", speed=1.5)
    )
    assert speech.voice_name == "narrator"
    builder = payloads(tmp_path)
    payload = builder.build(await builder.check(speech.fields), speech.input, owner=ADMIN)
    assert payload == {
        "model": load_config().models.served_model_name,
        "input": "Hello there.",
        "response_format": "pcm",
        "stream_format": "audio",
        "seed": 7,
        "max_new_tokens": 100,
        "ref_text": "hi",
        "language": "en",
        "instructions": "calm",  # the worker takes it (and Higgs ignores it), as in a session
    }


def test_default_voice_is_not_sent(tmp_path: Path) -> None:
    speech = parse_speech_request(body())
    payload = payloads(tmp_path).build(speech.fields, speech.input, owner=ADMIN)
    assert "voice" not in payload
    # speed is applied by the gateway's encoder, never sent to the worker (it rejects
    # speed != 1 on streams).
    assert "speed" not in payload


@pytest.mark.parametrize("tokens", [1, 5, 7])
def test_a_budget_below_the_first_audio_frame_is_refused_naming_the_minimum(tokens: int) -> None:
    # vllm-omni 0.30.0: fewer than 8 decode rows make an empty chunk
    # (model_executor/stage_input_processors/higgs_audio_v3.py, talker2code2wav_async_chunk):
    # the worker answers 200 with no audio, which the gateway refuses before it gets there.
    with pytest.raises(GatewayError) as caught:
        parse_speech_request(body(max_new_tokens=tokens))
    assert (caught.value.status, caught.value.param) == (400, "max_new_tokens")
    assert "at least 8" in caught.value.message


def test_budgets_past_2048_tokens_are_allowed_up_to_the_profiles_model_length() -> None:
    assert parse_speech_request(body(max_new_tokens=8)).max_new_tokens == 8
    assert parse_speech_request(body(max_new_tokens=5000)).max_new_tokens == 5000  # ~200 s of audio
    assert max_new_tokens_limit([8192, None, 4096]) == 4096
    assert max_new_tokens_limit([None]) is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (body(input="   "), "'input' must contain text to speak."),
        (body(input="x" * 4097), "'input' must be at most 4096 characters."),
        (body(speed=5), "'speed' must be at most 4.0."),
        (body(speed=0.1), "'speed' must be at least 0.25."),
        (body(speed="fast"), "'speed' must be a number."),
        # In the order declared, every time (pydantic-core's own list changes order per process).
        (body(stream_format="chunks"), "'stream_format' must be one of 'audio' or 'sse'."),
        (body(task_type="Clone"), "'task_type' must be one of 'CustomVoice', 'VoiceDesign' or 'Base'."),
        (body(input=["a", "b"]), "'input' must be a string."),
        (body(extra_params=1), "'extra_params' must be a JSON object."),
        (body(seed=1e30), "'seed' is too large a number."),
        (body(max_new_tokens=1e30), "'max_new_tokens' is too large a number."),
    ],
)
def test_validation_messages_are_plain_sentences(raw: bytes, message: str) -> None:
    # Not pydantic's wording ("Value error, ...", "String should have at most ..."): clients show these.
    with pytest.raises(GatewayError) as caught:
        parse_speech_request(raw)
    assert caught.value.message == message


# Phrases of pydantic's own messages ("Input should be a valid dictionary", "Unable to parse
# input string as an integer, exceeded maximum size", "Value should have at most 8192 items").
PYDANTIC_WORDING = ("Input should", "should have", "Value error", "Unable to parse", "valid dictionary", "valid list")
WRONG_VALUES = (None, 1, -1, 1.5, 1e30, "x", "", "x" * 300, [], [1], [["x"]], {}, {"a": 1}, True, [0.0] * 9000)
FIELDS = (
    "model", "input", "voice", "instructions", "response_format", "speed", "stream_format", "stream",
    "sample_rate", "ref_audio", "ref_text", "seed", "max_new_tokens", "language", "task_type", "extra_params",
    "initial_codec_chunk_frames", "non_streaming_mode", "word_timestamps", "ambient_sound", "duration_seconds",
    "x_vector_only_mode", "speaker_embedding", "references",
)  # fmt: skip


@pytest.mark.parametrize("name", FIELDS)
def test_no_wrong_value_of_any_field_is_answered_in_pydantic_words(name: str) -> None:
    for value in WRONG_VALUES:
        try:
            parse_speech_request(body(**{name: value}))
        except GatewayError as exc:
            assert not any(phrase in exc.message for phrase in PYDANTIC_WORDING), f"{name}={value!r}: {exc.message}"
