"""The prompt's upper bound: what no worker can hold is a 400 naming the field, before any
worker is called, and ``max_new_tokens`` is clipped to what is surely left (docs/reliability.md)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from gateway.config import load_config
from gateway.errors import GatewayError
from gateway.worker.prompt_bound import PromptBound, Reference, clip_tokens
from gateway.security.ref_audio import RefAudioPolicy
from gateway.sessions.voice import SessionVoices
from gateway.worker.session_protocol import StreamingSpeechSessionConfig
from gateway.voices.owners import ADMIN
from gateway.voices.store import VoiceStore
from gateway.worker_payload import SpeechFields, WorkerPayloads
from tests.support.audio import reference_wav

MODEL_LEN = 8192
EMOJI = "\U0001f600"  # 4 bytes of UTF-8
CJK = "\u8bed"  # 3 bytes
CLIP = reference_wav(2.5)
DATA_URI = "data:audio/wav;base64," + base64.b64encode(CLIP).decode()


def refused(call: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        call()
    error = caught.value
    assert (error.status, error.code, error.type) == (400, "prompt_too_long", "invalid_request_error")
    assert error.param in error.message and str(MODEL_LEN) in error.message
    return error


def test_the_template_and_a_byte_per_token_bound_the_plain_prompt() -> None:
    bound = PromptBound(MODEL_LEN)
    # <|tts|> <|text|> {input} <|audio|>, and at least 8 tokens left for the first audio frame.
    fits = "a" * (MODEL_LEN - 3 - 8)
    assert bound.room_for_audio(fits, None, None) == 8
    error = refused(lambda: bound.room_for_audio(fits + "a", None, None))
    assert error.param == "input" and f"at most {MODEL_LEN - 3 - 8} bytes" in error.message


@pytest.mark.parametrize("char", [EMOJI, CJK], ids=["emoji", "cjk"])
def test_4096_rare_script_characters_pass_the_character_limit_but_not_the_bound(char: str) -> None:
    # 4096 characters is the gateway's (and OpenAI's) input limit; at 3-4 bytes each, byte-level
    # BPE may spend more tokens on them than any worker's model length holds.
    error = refused(lambda: PromptBound(MODEL_LEN).room_for_audio(char * 4096, None, None))
    assert error.param == "input" and "3 bytes, emoji 4" in error.message


def test_ref_text_counts_only_beside_a_reference_clip() -> None:
    bound = PromptBound(MODEL_LEN)
    long_ref_text = CJK * 4096
    assert bound.room_for_audio("Hello.", long_ref_text, None) > 8000, "no clip: the worker leaves ref_text out"
    error = refused(lambda: bound.room_for_audio("Hello.", long_ref_text, Reference(5.0)))
    assert error.param == "ref_text"


def test_the_clip_costs_25_tokens_a_second_plus_the_delay_pattern() -> None:
    assert clip_tokens(10.0) == 1 + 250 + 1 + 7  # <|ref_audio|>, frames, a spare frame, 7 delay rows
    assert clip_tokens(99.0) == clip_tokens(30.0), "the worker refuses longer clips anyway"
    bound = PromptBound(MODEL_LEN)
    assert bound.room_for_audio("Hi.", "Hello.", Reference(10.0)) == MODEL_LEN - (3 + 3) - clip_tokens(10.0) - (1 + 6)


def test_an_unmeasured_clip_counts_as_30_s_and_a_data_uri_is_measured_only_when_that_matters() -> None:
    measured: list[int] = []

    def seconds(audio: bytes) -> float:
        measured.append(len(audio))
        return 2.5

    bound = PromptBound(MODEL_LEN, seconds)
    assert bound.room_for_audio("Hi.", None, Reference(None, DATA_URI)) == MODEL_LEN - 6 - clip_tokens(30.0)
    assert measured == [], "a short prompt fits whatever the clip: nothing read"
    near = "a" * (MODEL_LEN - 8 - 3 - clip_tokens(2.5))
    assert bound.room_for_audio(near, None, Reference(None, DATA_URI)) == 8
    assert measured == [min(len(CLIP), 6144)], "only the clip's head is decoded"
    url = Reference(None)  # a URL: the gateway cannot measure it
    assert refused(lambda: bound.room_for_audio(near, None, url)).param == "ref_audio"


def test_a_wav_is_measured_from_its_header_and_other_containers_count_as_30_s() -> None:
    near = "a" * (MODEL_LEN - 8 - 3 - clip_tokens(2.5))
    assert PromptBound(MODEL_LEN).room_for_audio(near, None, Reference(None, DATA_URI)) == 8
    not_a_wav = "data:audio/flac;base64," + base64.b64encode(b"fLaC" + bytes(200)).decode()
    assert refused(lambda: PromptBound(MODEL_LEN).room_for_audio(near, None, Reference(None, not_a_wav))).param == "ref_audio"


# ---- through the worker payload: HTTP requests and session sentences alike ------------------
def payloads(tmp_path: Path, model_len: int | None = MODEL_LEN) -> WorkerPayloads:
    config = load_config(overrides={"data_dir": str(tmp_path)})
    store = VoiceStore.in_data_dir(tmp_path)
    store.add("anna", CLIP, consent="yes", ref_text=CJK * 1000)
    return WorkerPayloads(config.models, config.voices, store, RefAudioPolicy(config.auth), model_len)


def test_max_new_tokens_is_clipped_to_what_is_surely_left(tmp_path: Path) -> None:
    builder = payloads(tmp_path)
    text = "a" * 4000
    payload = builder.build(SpeechFields(model=None, voice=None, max_new_tokens=8000), text, owner=ADMIN)
    assert payload["max_new_tokens"] == MODEL_LEN - 3 - 4000
    small = builder.build(SpeechFields(model=None, voice=None, max_new_tokens=100), text, owner=ADMIN)
    assert small["max_new_tokens"] == 100
    assert "max_new_tokens" not in builder.build(SpeechFields(model=None, voice=None), text, owner=ADMIN), "the worker's default stays"


def test_an_uploaded_voice_brings_its_clip_and_its_ref_text(tmp_path: Path) -> None:
    builder = payloads(tmp_path)
    # The voice's stored ref_text (3000 bytes) plus 5200 bytes of input cannot fit.
    text = "a" * 5200
    error = refused(lambda: builder.build(SpeechFields(model=None, voice="anna"), text, owner=ADMIN))
    assert error.param == "voice"
    # The request's own ref_text replaces the stored one, as on the worker.
    assert builder.build(SpeechFields(model=None, voice="anna", ref_text="Hello."), text, owner=ADMIN)["voice"] == "anna"
    error = refused(lambda: builder.build(SpeechFields(model=None, voice="anna", ref_text=EMOJI * 1000), text, owner=ADMIN))
    assert error.param == "ref_text"


def test_inline_ref_audio_wins_over_the_voice(tmp_path: Path) -> None:
    builder = payloads(tmp_path)
    text = "a" * 5200
    payload = builder.build(SpeechFields(model=None, voice="anna", ref_audio=DATA_URI), text, owner=ADMIN)
    assert payload["ref_audio"] == DATA_URI, "the voice's stored ref_text is not the worker's prompt here"


def test_without_a_known_model_length_nothing_is_bounded(tmp_path: Path) -> None:
    payload = payloads(tmp_path, None).build(SpeechFields(model=None, voice=None, max_new_tokens=9000), EMOJI * 4096, owner=ADMIN)
    assert payload["max_new_tokens"] == 9000


async def test_a_voice_session_sentence_is_bounded_like_a_request(tmp_path: Path) -> None:
    voices = SessionVoices(payloads(tmp_path), new_seed=lambda: 42)
    config = await voices.accept(StreamingSpeechSessionConfig(max_new_tokens=8000))
    assert voices.payload(config, "Hello there.")["max_new_tokens"] == 8000
    assert voices.payload(config, "a" * 1000)["max_new_tokens"] == MODEL_LEN - 3 - 1000
    error = refused(lambda: voices.payload(config, CJK * 4096))
    assert error.param == "input"
