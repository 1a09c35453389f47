"""Every non-streaming endpoint and every refusal of a real emulator process."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import av
import httpx
import numpy as np
import pytest

from gateway.emulator.encode import wav_file
from tests.support.procs import Proc, running_emulator

MODEL = "bosonai/higgs-audio-v3-tts-4b"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    extra = ["--served-model-name", MODEL, "higgs"]
    with running_emulator(tmp_path_factory.mktemp("api"), time_scale=0.02, extra=extra) as proc:
        yield proc


@pytest.fixture
def client(emulator: Proc) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator.url, timeout=30) as http:
        yield http


def tone_wav(seconds: float) -> bytes:
    t = np.arange(int(24000 * seconds)) / 24000
    return wav_file((np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes())


def speech(client: httpx.Client, **body: object) -> httpx.Response:
    return client.post("/v1/audio/speech", json={"input": "Hello from the emulator.", **body})


def assert_worker_error(response: httpx.Response, status: int, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and error["message"]
    if param is not None:
        assert error["param"] == param


def test_health_load_version_models(client: httpx.Client) -> None:
    health = client.get("/health").json()
    assert health["status"] == "healthy" and health["details"]["speech_audio"].startswith("espeak-ng")
    assert client.get("/load").json() == {"server_load": 0}
    assert client.get("/version").json()["version"] == "0.30.0"
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL, "higgs"]


@pytest.mark.parametrize(
    ("response_format", "content_type", "codec"),
    [("wav", "audio/wav", "pcm_s16le"), ("flac", "audio/flac", "flac"), ("mp3", "audio/mpeg", "mp3"), ("opus", "audio/ogg", "opus")],
)
def test_whole_file_formats_decode(client: httpx.Client, response_format: str, content_type: str, codec: str) -> None:
    response = speech(client, response_format=response_format)
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    with av.open(io.BytesIO(response.content)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.name.startswith(codec)
        seconds = sum(frame.samples / frame.sample_rate for frame in container.decode(stream))
    assert 1.2 < seconds < 2.5  # 24 characters at ~15 per second


def test_whole_file_headers_count_tokens(client: httpx.Client) -> None:
    response = speech(client, response_format="pcm")
    assert response.headers["content-type"] == "audio/pcm"
    inputs = int(response.headers["x-vllm-omni-input-tokens"])
    outputs = int(response.headers["x-vllm-omni-output-tokens"])
    assert inputs > 0 and outputs >= len(response.content) // 1920
    assert int(response.headers["x-vllm-omni-total-tokens"]) == inputs + outputs


def test_speed_changes_the_whole_file_duration(client: httpx.Client) -> None:
    normal = len(speech(client, response_format="pcm").content)
    fast = len(speech(client, response_format="pcm", speed=2.0).content)
    assert fast == pytest.approx(normal / 2, abs=4)


def test_max_new_tokens_caps_the_clip(client: httpx.Client) -> None:
    long_text = "A fairly long sentence that would take several seconds to say out loud. " * 3
    capped = client.post("/v1/audio/speech", json={"input": long_text, "response_format": "pcm", "max_new_tokens": 32})
    assert len(capped.content) == (32 - 7 - 1) * 1920  # the delay steps and the trimmed residual frame


def test_the_model_field_must_name_the_served_model(client: httpx.Client) -> None:
    assert speech(client, model="higgs").status_code == 200
    assert speech(client, model=MODEL).status_code == 200
    assert_worker_error(speech(client, model="tts-1"), 404, "model")


# The server's own checks answer with no param (create_error_response); the body's
# validation names the location as vLLM cleans it ("body.<field>", "body" for the model's
# own validators) with type "Bad Request".
SERVER, BODY = "BadRequestError", "Bad Request"


@pytest.mark.parametrize(
    ("body", "kind", "param"),
    [
        ({"input": ""}, SERVER, None),
        ({"input": "   \n"}, SERVER, None),
        ({"voice": "alloy"}, SERVER, None),
        ({"voice": {"id": "alloy"}}, SERVER, None),
        ({"sample_rate": 24000}, SERVER, None),
        ({"stream_format": "audio", "response_format": "mp3"}, BODY, "body"),
        ({"stream_format": "audio", "response_format": "flac"}, BODY, "body"),
        ({"stream_format": "sse", "response_format": "opus"}, BODY, "body"),
        ({"stream_format": "audio", "response_format": "pcm", "speed": 1.5}, SERVER, None),
        ({"response_format": "aac"}, BODY, "body.response_format"),
        ({"speed": 9.0}, BODY, "body.speed"),
        ({"ref_audio": "not-a-uri"}, SERVER, None),
        ({"ref_audio": "data:audio/wav;base64,!!!"}, SERVER, None),
    ],
)
def test_bad_requests_are_400_in_the_worker_shape(client: httpx.Client, body: dict[str, object], kind: str, param: str | None) -> None:
    response = client.post("/v1/audio/speech", json={"input": "Hello there.", **body})
    assert_worker_error(response, 400)
    assert (response.json()["error"]["type"], response.json()["error"]["param"]) == (kind, param)


def test_missing_input_and_broken_json_are_400(client: httpx.Client) -> None:
    assert_worker_error(client.post("/v1/audio/speech", json={"voice": "default"}), 400, "body.input")
    broken = client.post("/v1/audio/speech", content=b"{not json", headers={"content-type": "application/json"})
    assert_worker_error(broken, 400)


def test_default_voice_and_unknown_fields_are_fine(client: httpx.Client) -> None:
    for voice in ("default", "DEFAULT", {"id": "Default"}):
        assert speech(client, voice=voice, response_format="pcm", language="English", whatever=1).status_code == 200
    assert speech(client, speaker="default", instructions="calm", task_type="Base").status_code == 200
    assert_worker_error(speech(client, task_type="tts"), 400)  # an enum on the real worker


def test_voice_cloning_fields(client: httpx.Client) -> None:
    clip = "data:audio/wav;base64," + base64.b64encode(tone_wav(2.0)).decode()
    cloned = speech(client, response_format="pcm", ref_audio=clip, ref_text="a reference")
    plain = speech(client, response_format="pcm")
    assert cloned.status_code == 200
    # speech_usage.py: Higgs usage counts the text only, never the reference audio.
    assert cloned.headers["x-vllm-omni-input-tokens"] == plain.headers["x-vllm-omni-input-tokens"]
    assert cloned.content != plain.content  # another timbre
    too_short = "data:audio/wav;base64," + base64.b64encode(tone_wav(0.3)).decode()
    assert_worker_error(speech(client, ref_audio=too_short), 400)
    assert "too short" in speech(client, ref_audio=too_short).json()["error"]["message"]


def test_voices_upload_use_list_delete(client: httpx.Client) -> None:
    assert client.get("/v1/audio/voices").json() == {"voices": ["default"], "uploaded_voices": []}
    files = {"audio_sample": ("anna.wav", tone_wav(3.0), "audio/wav")}
    uploaded = client.post("/v1/audio/voices", files=files, data={"name": "Anna", "consent": "yes", "ref_text": "hi"})
    assert uploaded.status_code == 200, uploaded.text
    body = uploaded.json()
    assert body["success"] is True
    voice = body["voice"]
    assert voice["name"] == "Anna" and voice["mime_type"] == "audio/wav" and voice["ref_text"] == "hi"
    assert voice["file_size"] == len(tone_wav(3.0)) and voice["created_at"] > 0
    listed = client.get("/v1/audio/voices").json()
    assert listed["voices"] == ["anna", "default"] and [v["name"] for v in listed["uploaded_voices"]] == ["Anna"]
    with_voice = speech(client, voice="anna", response_format="pcm")
    assert with_voice.status_code == 200
    assert with_voice.content != speech(client, response_format="pcm").content
    assert client.post("/v1/audio/voices", files=files, data={"name": "anna", "consent": "yes"}).status_code == 200  # overwrites
    assert client.delete("/v1/audio/voices/Anna").json()["success"] is True
    assert client.delete("/v1/audio/voices/Anna").status_code == 404
    gone = speech(client, voice="anna")
    assert_worker_error(gone, 400)
    assert gone.json()["error"]["message"].startswith("Unknown voice 'anna'")


def test_voice_upload_refusals(client: httpx.Client) -> None:
    files = {"audio_sample": ("v.wav", tone_wav(1.5), "audio/wav")}
    assert_worker_error(client.post("/v1/audio/voices", files=files, data={"name": "nobody"}), 400)  # no consent
    assert_worker_error(client.post("/v1/audio/voices", files=files, data={"consent": "yes"}), 400)  # no name
    junk = {"audio_sample": ("v.wav", b"this is not audio", "audio/wav")}
    assert_worker_error(client.post("/v1/audio/voices", files=junk, data={"name": "junk", "consent": "yes"}), 400)
    huge = {"audio_sample": ("big.wav", b"\0" * (10 * 1024 * 1024 + 1), "audio/wav")}
    assert_worker_error(client.post("/v1/audio/voices", files=huge, data={"name": "big", "consent": "yes"}), 400)
    assert client.get("/v1/audio/voices").json()["uploaded_voices"] == []


def test_metrics_expose_the_worker_series(client: httpx.Client) -> None:
    speech(client, response_format="pcm")
    text = client.get("/metrics").text
    for name in (
        'vllm_omni:num_requests_running{model_name="%s"}' % MODEL,
        'vllm_omni:num_requests_waiting{model_name="%s"}' % MODEL,
        'vllm:num_requests_running{model_name="%s",replica="0",stage="0"}' % MODEL,
        'vllm:num_requests_waiting{model_name="%s",replica="0",stage="0"}' % MODEL,
        "vllm_omni:e2e_request_latency_s_bucket",
        "vllm_omni:request_queue_wait_s_bucket",
        "vllm_omni:audio_rtf_bucket",
        "vllm_omni:audio_duration_s_bucket",
        "vllm_omni:requests_success_total",
        "vllm_omni:audio_frames_total",
        "higgs_emulator_decode_steps_total{batch_size=",
    ):
        assert name in text, name
    assert "# TYPE vllm_omni:requests_success_total counter" in text or "# TYPE vllm_omni:requests_success counter" in text


def test_unknown_routes_and_flags_of_the_emulator(client: httpx.Client) -> None:
    assert client.get("/v1/nothing").status_code == 404
    info = client.get("/emulator/info").json()
    assert info["max_num_seqs"] == 16 and info["decode_graphs"] is True and info["capture_sizes"] == [1, 2, 4, 8, 16]
