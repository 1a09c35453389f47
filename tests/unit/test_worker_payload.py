"""One worker payload for an HTTP request and for a session's sentence: the same checks
(refused on HTTP with a 400, in a session with an ``error`` that ends it when it is the
first config) and the same fields forwarded."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest

from gateway.api.speech_request import parse_speech_request
from gateway.config import load_config
from gateway.errors import GatewayError
from gateway.security.ref_audio import RefAudioPolicy
from gateway.sessions.voice import ConfigRefused, SessionVoices
from gateway.worker.session_protocol import StreamingSpeechSessionConfig
from gateway.voices.owners import ADMIN
from gateway.voices.store import VoiceStore
from gateway.worker_payload import WorkerPayloads
from tests.unit.voices.samples import wav_bytes

LIMIT = 8192  # the profiles' Stage 0 max_model_len


def payloads(tmp_path: Path, store: VoiceStore | None = None) -> WorkerPayloads:
    config = load_config(overrides={"data_dir": str(tmp_path)})
    store = store or VoiceStore.in_data_dir(tmp_path)
    return WorkerPayloads(config.models, config.voices, store, RefAudioPolicy(config.auth), LIMIT)


async def http_refusal(builder: WorkerPayloads, **fields: object) -> GatewayError:
    document = {"model": "tts-1", "input": "Hello.", "voice": "alloy", **fields}
    with pytest.raises(GatewayError) as caught:
        speech = parse_speech_request(orjson.dumps(document))
        await builder.check(speech.fields)
    return caught.value


async def session_refusal(builder: WorkerPayloads, **fields: object) -> str:
    with pytest.raises(ConfigRefused) as caught:
        await SessionVoices(builder).accept(StreamingSpeechSessionConfig(**fields))  # type: ignore[arg-type]
    return caught.value.message


@pytest.mark.parametrize("tokens", [1, 7, LIMIT + 1])
async def test_a_session_refuses_the_max_new_tokens_http_refuses_with_the_same_text(tmp_path: Path, tokens: int) -> None:
    builder = payloads(tmp_path)
    http = await http_refusal(builder, max_new_tokens=tokens)
    assert (http.status, http.param) == (400, "max_new_tokens")
    assert await session_refusal(builder, max_new_tokens=tokens) == f"Invalid session config: {http.message}"


async def test_a_session_accepts_the_budgets_http_accepts(tmp_path: Path) -> None:
    voices = SessionVoices(payloads(tmp_path), new_seed=lambda: 5)
    for tokens in (8, LIMIT):
        config = await voices.accept(StreamingSpeechSessionConfig(max_new_tokens=tokens))
        # Clipped to what the prompt's bound leaves (the template's 3 tokens and a token a byte).
        assert voices.payload(config, "Hi.")["max_new_tokens"] == min(tokens, LIMIT - 3 - 3)


async def test_a_request_and_a_session_sentence_send_the_worker_the_same_payload(tmp_path: Path) -> None:
    builder = payloads(tmp_path)
    shared = {"seed": 11, "max_new_tokens": 300, "language": "en", "instructions": "calm", "ref_text": "A reference."}
    speech = parse_speech_request(orjson.dumps({"model": "tts-1", "input": "Hello.", "voice": "alloy", **shared}))
    over_http = builder.build(await builder.check(speech.fields), speech.input, owner=ADMIN)
    voices = SessionVoices(builder)
    in_session = voices.payload(await voices.accept(StreamingSpeechSessionConfig(voice="alloy", **shared)), "Hello.")  # type: ignore[arg-type]
    assert in_session == over_http
    assert over_http["instructions"] == "calm"
    # task_type exists only in the session protocol; it reaches the worker as instructions do.
    typed = await voices.accept(StreamingSpeechSessionConfig(task_type="Base"))
    assert voices.payload(typed, "Hi.")["task_type"] == "Base"


async def test_the_reference_length_is_known_for_an_uploaded_voice_and_an_inline_wav_only(tmp_path: Path) -> None:
    store = VoiceStore.in_data_dir(tmp_path)
    builder = payloads(tmp_path, store)
    store.add("narrator", wav_bytes(4.0), consent="true")
    assert builder.reference_seconds({"voice": "narrator"}) == pytest.approx(4.0)
    inline = "data:audio/wav;base64," + base64.b64encode(wav_bytes(2.5)).decode()
    assert builder.reference_seconds({"ref_audio": inline}) == pytest.approx(2.5)
    # The worker fetches a URL: its length is unknown here, as is a built-in voice's (none).
    assert builder.reference_seconds({"ref_audio": "https://clips.example/a.wav"}) is None
    assert builder.reference_seconds({"voice": "alloy"}) is None
