"""Behaviours of the emulator that must match the vllm-omni 0.30.0 worker, one test each.

The source of each behaviour (file and function in the 0.30.0 wheel) is in the fidelity
table of docs/emulator.md.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway.worker.profile import DeployProfile
from gateway.emulator.app import EmulatorSettings, create_app
from gateway.emulator.cli import build_parser, max_uploaded_from_env, speaker_dir_from_env
from gateway.emulator.encode import wav_file
from gateway.emulator.faults import Faults
from gateway.emulator.protocol import parse_speech_request
from gateway.emulator.errors import WorkerError
from tests.unit.emulator.test_voices_and_encode import tone
from tests.unit.voices.samples import encoded

MODEL = "bosonai/higgs-audio-v3-tts-4b"


@pytest.fixture
def client(low_latency: DeployProfile, tmp_path: Path) -> Iterator[TestClient]:
    settings = EmulatorSettings(
        model=MODEL, profile=low_latency, voices_dir=tmp_path / "speakers", served_model_names=("higgs",), time_scale=0.001
    )
    with TestClient(create_app(settings)) as http:
        yield http


def sse_events(body: str) -> list[tuple[str, dict[str, object]]]:
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def upload(client: TestClient, name: str, sample: bytes, mime: str = "audio/wav", **form: str):
    files = {"audio_sample": (f"{name}.bin", sample, mime)}
    return client.post("/v1/audio/voices", files=files, data={"name": name, "consent": "rec-1", **form})


def test_sse_wav_sends_the_header_as_its_own_delta_and_done_has_input_details(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", json={"input": "Hello there.", "stream": True, "response_format": "wav"})
    events = sse_events(response.text)
    header = base64.b64decode(events[0][1]["audio"])  # type: ignore[arg-type]
    assert header[:4] == b"RIFF" and len(header) == 44
    assert len(base64.b64decode(events[1][1]["audio"])) == 1920  # type: ignore[arg-type]
    name, done = events[-1]
    usage = done["usage"]
    assert name == "speech.audio.done"
    assert set(usage["input_token_details"]) == {"text_tokens", "audio_tokens"}  # type: ignore[index]


def test_sse_error_after_audio_says_discard_the_partial_audio(low_latency: DeployProfile, tmp_path: Path) -> None:
    settings = EmulatorSettings(model=MODEL, profile=low_latency, voices_dir=tmp_path, time_scale=0.001, faults=Faults(error_after_chunks=1))
    with TestClient(create_app(settings)) as http:
        response = http.post("/v1/audio/speech", json={"input": "Hello there, a longer sentence now.", "stream": True})
    name, error = sse_events(response.text)[-1]
    assert name == "speech.audio.error"
    assert error["error"]["partial_audio"] is True and error["error"]["action"] == "discard"  # type: ignore[index]


def test_whole_file_opus_is_audio_ogg(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", json={"input": "Hi there.", "response_format": "opus"})
    assert response.headers["content-type"] == "audio/ogg" and response.content[:4] == b"OggS"


def test_request_fields_as_the_real_protocol() -> None:
    with pytest.raises(WorkerError):
        parse_speech_request({"input": "x", "task_type": "Whatever"})
    assert parse_speech_request({"input": "x", "task_type": "Base"}).task_type == "Base"
    assert parse_speech_request({"input": "x", "max_new_tokens": 100_000}).max_new_tokens == 100_000
    aliased = parse_speech_request({"input": "x", "references": [{"audio_path": "https://a/b.wav", "text": "hi"}]})
    assert (aliased.ref_audio, aliased.ref_text) == ("https://a/b.wav", "hi")
    with pytest.raises(WorkerError):
        parse_speech_request({"input": "x", "references": [{"audio_path": "a"}, {"audio_path": "b"}]})


def test_abbreviated_flags_are_accepted() -> None:
    args = build_parser().parse_args([MODEL, "--omni", "--deploy-config", "x.yaml", "--enable-server-load", "--served-model", "a"])
    assert args.enable_server_load_tracking is True and args.served_model_name == ["a"]


def test_voice_upload_rules(client: TestClient) -> None:
    assert upload(client, "Anna", wav_file(tone(2))).status_code == 200
    again = upload(client, "anna", wav_file(tone(3)), ref_text="new words")
    assert again.status_code == 200  # re-upload overwrites
    listing = client.get("/v1/audio/voices").json()
    assert listing["voices"] == ["anna", "default"]
    (entry,) = listing["uploaded_voices"]
    assert entry["name"] == "anna" and entry["consent"] == "rec-1" and entry["ref_text"] == "new words"
    assert entry["embedding_source"] == "audio" and entry["embedding_dim"] is None
    for container, mime in (("webm", "audio/webm"), ("ipod", "audio/mp4"), ("adts", "audio/aac")):
        refused = upload(client, f"v{container}", encoded(container), mime)
        assert refused.status_code == 400 and "Could not decode" in refused.json()["error"]["message"]
    assert upload(client, "tiny", wav_file(tone(0.5))).status_code == 400
    assert upload(client, "long", wav_file(tone(31))).status_code == 400
    assert [v["name"] for v in client.get("/v1/audio/voices").json()["uploaded_voices"]] == ["anna"]
    assert client.delete("/v1/audio/voices/ANNA").json()["message"] == "Voice 'ANNA' deleted successfully"


def test_voices_come_back_from_the_speaker_dir(low_latency: DeployProfile, tmp_path: Path) -> None:
    settings = EmulatorSettings(model=MODEL, profile=low_latency, voices_dir=tmp_path / "speakers")
    with TestClient(create_app(settings)) as http:
        assert upload(http, "Kept", wav_file(tone(2))).status_code == 200
    with TestClient(create_app(settings)) as restarted:
        assert [v["name"] for v in restarted.get("/v1/audio/voices").json()["uploaded_voices"]] == ["Kept"]


def test_speaker_dir_and_cap_come_from_the_real_environment(tmp_path: Path) -> None:
    assert speaker_dir_from_env({"SPEAKER_SAMPLES_DIR": str(tmp_path)}) == tmp_path
    assert speaker_dir_from_env({}) is None
    assert max_uploaded_from_env({}) == 1000
    assert max_uploaded_from_env({"SPEAKER_MAX_UPLOADED": "5"}) == 5
    assert max_uploaded_from_env({"SPEAKER_MAX_UPLOADED": "lots"}) == 1000


def test_load_is_zero_without_load_tracking(low_latency: DeployProfile, tmp_path: Path) -> None:
    settings = EmulatorSettings(model=MODEL, profile=low_latency, voices_dir=tmp_path, load_tracking=False, time_scale=0.001)
    with TestClient(create_app(settings)) as http:
        with http.stream("POST", "/v1/audio/speech", json={"input": "A stream in flight.", "stream_format": "audio", "response_format": "pcm"}) as stream:
            next(stream.iter_bytes())
            assert http.get("/load").json() == {"server_load": 0}


def test_metric_labels_units_and_abort_counts(low_latency: DeployProfile, tmp_path: Path) -> None:
    settings = EmulatorSettings(
        model=MODEL, profile=low_latency, voices_dir=tmp_path, served_model_names=("higgs",), time_scale=0.001, faults=Faults(fail_next=1)
    )
    with TestClient(create_app(settings)) as http:
        assert http.post("/v1/audio/speech", json={"input": "Fails."}).status_code == 500
        pcm = http.post("/v1/audio/speech", json={"input": "Hello there.", "response_format": "pcm"}).content
        text = http.get("/metrics").text
    m = f'model_name="{MODEL}"'  # the positional model, not --served-model-name
    assert f'vllm_omni:requests_success_total{{finished_reason="stop",{m}}} 1.0' in text
    assert f'vllm_omni:requests_success_total{{finished_reason="abort",{m}}} 1.0' in text
    assert f'vllm_omni:requests_failed_total{{{m},reason="stage_error"}} 1.0' in text
    assert f'vllm_omni:audio_frames_total{{{m},replica="0",stage="1"}} {float(len(pcm) // 2)}' in text  # PCM samples
    assert f'vllm:num_requests_running{{{m},replica="0",stage="0"}}' in text
    assert f'vllm_omni:audio_rtf_count{{{m},replica="0",stage="1"}} 1.0' in text
