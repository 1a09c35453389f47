"""Every field of the released worker's speech request, through the gateway: a body the
worker's own model accepts is accepted with the worker's meaning, or refused on purpose.

The worker's model is vllm-omni 0.30.0's ``OpenAICreateSpeechRequest``, kept verbatim in
tests/fixtures/released_worker. Each row gives a field, values the released model accepts,
and what the gateway does with it (docs/clients.md has the same table for people).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from gateway.api.speech_request import NOT_FOR_HIGGS, SpeechRequest, parse_speech_request
from gateway.audio.formats import AudioFormat
from gateway.config import load_config
from gateway.errors import GatewayError
from gateway.security.ref_audio import RefAudioPolicy
from gateway.voices.owners import ADMIN
from gateway.voices.store import VoiceStore
from gateway.worker_payload import WorkerPayloads

_SPEC = importlib.util.spec_from_file_location(
    "released_speech_protocol",
    Path(__file__).resolve().parents[2] / "fixtures" / "released_worker" / "speech_protocol.py",
)
assert _SPEC is not None and _SPEC.loader is not None
released = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(released)
WorkerRequest: type[BaseModel] = released.OpenAICreateSpeechRequest

BASE = {"model": "higgs-audio-v3", "input": "Hello there.", "response_format": "pcm"}
DATA_URI = "data:audio/wav;base64,UklGRiQAAABXQVZF"

# Same field, same value, same meaning as OpenAI's and the worker's.
SAME = "same"
# Passed on to the worker as sent.
FORWARDED = "forwarded"
# Refused with a sentence: a Higgs worker would drop it silently, or refuse it itself.
REFUSED = "refused"

# field -> (values the released model accepts, what the gateway does)
ROWS: dict[str, tuple[list[Any], str]] = {
    "input": (["Hello there.", "Two sentences. Here."], SAME),
    "model": (["higgs-audio-v3", "tts-1", None], SAME),
    "voice": (["narrator", {"id": "narrator"}, None], SAME),
    "speaker": (["narrator"], SAME),
    "instructions": (["Speak calmly.", None], FORWARDED),
    "response_format": (["wav", "pcm", "flac", "mp3", "opus"], SAME),
    "sample_rate": ([8000, 16000, 48000], "resampled"),
    "speed": ([0.25, 1.0, 4.0, None], "stretched"),
    "stream_format": (["sse", "audio", None], "delivery"),
    "stream": ([True, False], "delivery"),
    "task_type": (["CustomVoice", "VoiceDesign", "Base", None], FORWARDED),
    "language": (["English", "Auto", None], FORWARDED),
    "ref_audio": ([DATA_URI, None], FORWARDED),
    "ref_text": (["The words in the reference.", None], FORWARDED),
    "references": ([[{"audio_path": DATA_URI, "text": "The words."}], [{"audio_path": DATA_URI}]], "ref_audio"),
    "max_new_tokens": ([8, 4096, None], FORWARDED),
    "seed": ([-(2**63), 0, 42, 2**63 - 1, None], FORWARDED),
    "initial_codec_chunk_frames": ([0, 16, None], FORWARDED),
    "non_streaming_mode": ([True, False, None], FORWARDED),
    "extra_params": ([{"temperature": 0.7, "top_p": 0.9, "top_k": 40}, None], FORWARDED),
    "word_timestamps": ([True], REFUSED),
    "ref_audio_2": ([DATA_URI], REFUSED),
    "ambient_sound": (["ocean waves crashing on a rocky beach"], REFUSED),
    "duration_seconds": ([3.0], REFUSED),
    "x_vector_only_mode": ([True], REFUSED),
    "speaker_embedding": ([[0.1, 0.2, 0.3], [[0.1, 0.2], [0.3, 0.4]]], REFUSED),
}
# The worker's spellings besides its declared fields (AliasChoices, the references alias).
WORKER_ALIASES = {"speaker", "references"}


def worker_body(field: str, value: Any) -> dict[str, Any]:
    """BASE with ``field`` set; an explicit null stays only where the worker types it nullable
    and the gateway must read it so (model, voice)."""
    body: dict[str, Any] = {**BASE, field: value}
    return {key: val for key, val in body.items() if val is not None or key in ("model", "voice")}


def payloads(tmp_path: Path) -> WorkerPayloads:
    config = load_config(overrides={"data_dir": str(tmp_path), "voices": {"aliases": {"narrator": None}}})
    return WorkerPayloads(config.models, config.voices, VoiceStore.in_data_dir(tmp_path), RefAudioPolicy(config.auth))


def test_the_table_covers_every_field_of_the_released_model() -> None:
    assert set(ROWS) == set(WorkerRequest.model_fields) | WORKER_ALIASES


def test_refusals_are_exactly_the_fields_a_higgs_worker_cannot_honour() -> None:
    refused = {field for field, (_, how) in ROWS.items() if how == REFUSED}
    assert refused == set(NOT_FOR_HIGGS) | {"word_timestamps"}


CASES = [(field, value) for field, (values, _) in ROWS.items() for value in values]


@pytest.mark.parametrize(("field", "value"), CASES, ids=[f"{f}={v!r}"[:60] for f, v in CASES])
def test_a_body_the_worker_accepts_means_the_same_through_the_gateway(tmp_path: Path, field: str, value: Any) -> None:
    body = worker_body(field, value)
    worker = WorkerRequest.model_validate(dict(body))  # the released model accepts it
    how = ROWS[field][1]
    if how == REFUSED:
        with pytest.raises(GatewayError) as caught:
            parse_speech_request(orjson.dumps(body))
        assert (caught.value.status, caught.value.param) == (400, field)
        assert "Value error" not in caught.value.message and "Input should" not in caught.value.message
        return
    speech = parse_speech_request(orjson.dumps(body))
    payload = payloads(tmp_path).build(speech.fields, speech.input, owner=ADMIN)
    if how == SAME:
        name = "voice" if field == "speaker" else field
        mine = speech.voice_name if name == "voice" else getattr(speech, name)
        assert mine == getattr(worker, name)
    elif how == FORWARDED:
        if value is None:
            assert field not in payload
        else:
            assert payload[field] == getattr(worker, field)
    elif how == "ref_audio":
        assert (payload["ref_audio"], payload.get("ref_text")) == (worker.ref_audio, worker.ref_text)
    elif how == "resampled":
        # A Higgs worker refuses every sample_rate; the gateway's encoder makes it.
        assert speech.sample_rate == worker.sample_rate and "sample_rate" not in payload
    elif how == "stretched":
        # The worker refuses speed != 1 on a stream; the gateway stretches the PCM itself.
        assert speech.tempo == (worker.speed if worker.speed is not None else 1.0) and "speed" not in payload
    elif how == "delivery":
        assert (speech.delivery() == "sse") == worker.is_sse_stream()
    # Whatever the client asked, the worker is asked for one PCM stream the gateway encodes.
    assert (payload["response_format"], payload["stream_format"]) == ("pcm", "audio")


@pytest.mark.parametrize("stream", [None, True, False])
@pytest.mark.parametrize("stream_format", [None, "audio", "sse"])
def test_stream_and_stream_format_together_mean_what_they_mean_on_the_worker(
    stream: bool | None, stream_format: str | None
) -> None:
    body = {**BASE, "stream": stream, "stream_format": stream_format}
    body = {key: value for key, value in body.items() if value is not None}
    worker = WorkerRequest.model_validate(dict(body))
    speech = parse_speech_request(orjson.dumps(body))
    assert speech.delivery() == ("sse" if worker.is_sse_stream() else "audio")


def test_bosons_model_name_streams_raw_audio_on_stream_true(tmp_path: Path) -> None:
    # livekit-plugins-boson 0.1.0 sends {"model": "higgs-audio-v3-tts", "stream": true} and reads raw PCM.
    builder = payloads(tmp_path)
    boson = parse_speech_request(orjson.dumps({**BASE, "model": "higgs-audio-v3-tts", "stream": True}))
    assert builder.serves("higgs-audio-v3-tts")
    assert boson.delivery(builder.raw_stream_models) == "audio"
    assert boson.model_copy(update={"stream_format": "sse"}).delivery(builder.raw_stream_models) == "sse"
    worker_meaning = parse_speech_request(orjson.dumps({**BASE, "stream": True}))
    assert worker_meaning.delivery(builder.raw_stream_models) == "sse"


@pytest.mark.parametrize(
    ("references", "extra", "message"),
    [
        ([], {}, "'references' must be a non-empty array of {audio_path, text} objects"),
        ("x", {}, "'references' must be a non-empty array of {audio_path, text} objects"),
        (
            [{"audio_path": DATA_URI}, {"audio_path": DATA_URI}],
            {},
            "'references' only supports a single reference; multi-shot voice clone is not supported",
        ),
        (["x"], {}, "'references[0]' must be an object with 'audio_path' and optional 'text'"),
        (
            [{"text": "t"}],
            {},
            "'references[0].audio_path' is required and must be a string (URL, data: URI, or file path)",
        ),
        ([{"audio_path": DATA_URI}], {"ref_audio": "data:audio/wav;base64,AAAA"}, "'references' and 'ref_audio' are mutually exclusive"),
        (
            [{"audio_path": DATA_URI, "text": "one"}],
            {"ref_text": "two"},
            "'references[0].text' and 'ref_text' conflict; supply only one",
        ),
    ],
)
def test_references_are_refused_with_the_workers_own_words(references: Any, extra: dict[str, Any], message: str) -> None:
    body = {**BASE, "references": references, **extra}
    with pytest.raises(ValueError, match="references"):
        WorkerRequest.model_validate(dict(body))
    with pytest.raises(GatewayError) as caught:
        parse_speech_request(orjson.dumps(body))
    assert (caught.value.status, caught.value.param, caught.value.message) == (400, "references", message)


def test_the_same_reference_twice_is_not_a_conflict() -> None:
    body = {**BASE, "references": [{"audio_path": DATA_URI, "text": "t"}], "ref_audio": DATA_URI, "ref_text": "t"}
    assert WorkerRequest.model_validate(dict(body)).ref_audio == DATA_URI
    assert parse_speech_request(orjson.dumps(body)).ref_audio == DATA_URI


def test_voice_wins_over_speaker_as_on_the_worker() -> None:
    body = {**BASE, "voice": "narrator", "speaker": "someone"}
    assert WorkerRequest.model_validate(dict(body)).voice == "narrator"
    assert parse_speech_request(orjson.dumps(body)).voice_name == "narrator"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"sample_rate": 7000}, "sample_rate"),
        ({"sample_rate": 22050, "response_format": "opus"}, "sample_rate"),
        ({"sample_rate": 0}, "sample_rate"),
        ({"task_type": "Clone"}, "task_type"),
        ({"ref_audio": [DATA_URI]}, "ref_audio"),
        ({"initial_codec_chunk_frames": -1}, "initial_codec_chunk_frames"),
        ({"extra_params": [1]}, "extra_params"),
        # Only the sampling overrides: the rest would land in the worker's internal extra_args.
        ({"extra_params": {"kv_transfer_params": {"remote_host": "10.0.0.1"}}}, "extra_params"),
        ({"extra_params": {"temperature": "hot"}}, "extra_params"),
        ({"extra_params": {"top_p": 0}}, "extra_params"),
        ({"extra_params": {"top_k": 1.5}}, "extra_params"),
        ({"temperature": 0.7}, "temperature"),  # neither OpenAI's nor the worker's: a typo, most likely
    ],
)
def test_what_the_gateway_cannot_serve_is_a_plain_400_on_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(GatewayError) as caught:
        parse_speech_request(orjson.dumps({**BASE, **body}))
    assert (caught.value.status, caught.value.param) == (400, param)
    assert "Value error" not in caught.value.message


def test_openais_defaults_stay_openais() -> None:
    # The worker defaults to wav and a whole file; OpenAI to mp3 and a byte stream.
    speech = parse_speech_request(orjson.dumps({"model": "tts-1", "input": "Hi.", "voice": "alloy"}))
    assert (speech.response_format, speech.delivery(), speech.tempo) == (AudioFormat.MP3, "audio", 1.0)
    assert isinstance(speech, SpeechRequest)
