"""The emulator answers as the released worker does, item by item.

Each test names the released file and lines it follows: ``vllm_omni`` paths are in the
vllm-omni 0.30.0 wheel, ``vllm`` paths in the vllm 0.30.0 wheel. The fidelity table of
docs/emulator.md lists the same.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gateway.worker.profile import DeployProfile
from gateway.emulator.app import EmulatorSettings, create_app
from gateway.emulator.cli import build_parser, emulator_settings
from gateway.emulator.clock import VirtualClock
from gateway.emulator.engine import Engine, EngineRequest
from gateway.emulator.faults import Faults
from gateway.emulator.metrics import RTF_BUCKETS, SECONDS_BUCKETS, SECONDS_FAST_BUCKETS, EmulatorMetrics, EngineCounts
from gateway.emulator.spoken import SpeechAudio
from gateway.worker.timing import StepModel
from tests.support.clip_server import HUGE_BYTES, ClipServer, clip_server, tone_wav
from tests.support.procs import free_port

MODEL = "bosonai/higgs-audio-v3-tts-4b"
TEXT = "Hello there, this is a short sentence to speak."
PCM_STREAM = {"stream_format": "audio", "response_format": "pcm"}


def settings(profile: DeployProfile, tmp_path: Path, **changes: Any) -> EmulatorSettings:
    options: dict[str, Any] = {
        "model": MODEL, "profile": profile, "voices_dir": tmp_path / "speakers", "time_scale": 0.001,
        "audio": functools.partial(SpeechAudio, speak=False),
    }  # fmt: skip
    return EmulatorSettings(**{**options, **changes})


@pytest.fixture
def client(low_latency: DeployProfile, tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings(low_latency, tmp_path))) as http:
        yield http


@pytest.fixture(scope="module")
def clips() -> Iterator[ClipServer]:
    with clip_server() as server:
        yield server


def speak(client: TestClient, **fields: Any) -> Any:
    return client.post("/v1/audio/speech", json={"input": TEXT, **fields})


def sse_events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def metric_lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name)]


def sample(text: str, name: str) -> float:
    [line] = metric_lines(text, name + "{") or metric_lines(text, name + " ")
    return float(line.rsplit(" ", 1)[1])


def data_uri(wav: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(wav).decode()


def body_messages(app: Any, body: dict[str, Any]) -> list[bytes]:
    """Every ``http.response.body`` message the app sends, as sent (chunk boundaries kept)."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/audio/speech", "raw_path": b"/v1/audio/speech", "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
        "server": ("worker.test", 80), "client": ("127.0.0.1", 1),
    }  # fmt: skip
    sent: list[bytes] = []

    async def run() -> None:
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                sent.append(bytes(message["body"]))

        try:
            await app(scope, receive, send)
        except Exception:  # the cut fault ends the app with an exception, as a dropped connection
            pass

    asyncio.run(run())
    return sent


# ---- max_new_tokens ----------------------------------------------------------------------------
@pytest.mark.parametrize("tokens", range(1, 8))
def test_a_budget_below_8_tokens_is_a_200_with_no_audio(client: TestClient, tokens: int) -> None:
    # vllm_omni model_executor/stage_input_processors/higgs_audio_v3.py 300-306 and 330-336:
    # fewer than 8 rows de-delay into no frame and finish with an empty chunk; Stage 1 turns
    # it into no samples (models/higgs_audio_v3/higgs_audio_v3_code2wav.py 512-515).
    raw = speak(client, max_new_tokens=tokens, **PCM_STREAM)
    assert (raw.status_code, raw.content) == (200, b"")
    wav = speak(client, max_new_tokens=tokens, stream_format="audio", response_format="wav")
    assert wav.status_code == 200 and len(wav.content) == 44 and wav.content[:4] == b"RIFF"  # the header, no audio
    events = sse_events(speak(client, max_new_tokens=tokens, stream=True, response_format="pcm").text)
    assert [e["type"] for e in events] == ["speech.audio.delta", "speech.audio.done"]
    assert events[0]["audio"] == "" and events[1]["usage"]["output_tokens"] == tokens
    whole = speak(client, max_new_tokens=tokens, response_format="pcm")
    assert (whole.status_code, whole.content) == (200, b"")
    assert whole.headers["x-vllm-omni-output-tokens"] == str(tokens)


def test_eight_tokens_make_one_frame_and_each_token_after_nine_one_more(client: TestClient) -> None:
    # higgs_audio_v3.py 361-367: the final flush trims the residual frame only if two are left.
    assert [len(speak(client, max_new_tokens=n, **PCM_STREAM).content) // 1920 for n in (8, 9, 10, 12)] == [1, 1, 2, 4]


def test_max_new_tokens_replaces_max_tokens_up_to_max_model_len(low_latency: DeployProfile) -> None:
    # vllm_omni entrypoints/openai/tts_adapters/base.py 108-120: max_new_tokens replaces
    # Stage 0's max_tokens (2048), and vLLM stops a request at max_model_len (8192).
    model = StepModel(low_latency)
    long_text = "x" * 6000  # 400 s of speech
    assert model.plan(long_text).frames == 2048 - 8
    assert model.plan(long_text, max_new_tokens=4000) == model.plan(long_text, 4000, prompt_tokens=100)
    assert model.plan(long_text, max_new_tokens=4000).frames == 4000 - 8
    capped = model.plan(long_text, max_new_tokens=10**9, prompt_tokens=800)
    assert capped.decode_steps == 8192 - 800 and capped.frames == 8192 - 800 - 8


def test_a_clip_longer_than_82_s_streams_like_any_other(client: TestClient) -> None:
    text = "y" * 1800  # 120 s of speech, more than Stage 0's default 2048 tokens
    response = speak(client, input=text, max_new_tokens=3100, **PCM_STREAM)
    assert response.status_code == 200 and len(response.content) == 3000 * 1920


# ---- streams -----------------------------------------------------------------------------------
def test_a_raw_wav_stream_sends_its_header_with_the_first_audio(low_latency: DeployProfile, tmp_path: Path) -> None:
    # vllm_omni entrypoints/openai/serving_speech.py 1669-1691: the header is built when the
    # first chunk is there and yielded just before it; a stream that fails before its first
    # chunk has sent nothing.
    body = {"input": TEXT, "stream_format": "audio", "response_format": "wav"}
    sent = body_messages(create_app(settings(low_latency, tmp_path)), body)
    assert len(sent[0]) == 44 and sent[0][:4] == b"RIFF" and len(sent[1]) == 1920
    failing = settings(low_latency, tmp_path / "f", faults=Faults(error_after_chunks=0))
    assert body_messages(create_app(failing), body) == [], "no header before the first audio"


# ---- metrics -----------------------------------------------------------------------------------
def bucket_bounds(text: str, family: str) -> tuple[float, ...]:
    bounds = {float(m) for m in re.findall(rf'^{re.escape(family)}_bucket{{.*le="([^"+]+)"', text, re.M)}
    return tuple(sorted(bounds))


def test_worker_histograms_have_the_released_buckets(client: TestClient) -> None:
    # vllm_omni metrics/definitions.py 262-310 (SECONDS_BUCKETS, SECONDS_FAST_BUCKETS,
    # RTF_BUCKETS), used by metrics/prometheus.py 27-55 and metrics/modality.py 41-70.
    assert SECONDS_BUCKETS == (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
    assert SECONDS_FAST_BUCKETS == (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
    assert RTF_BUCKETS == (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0, 10.0)
    speak(client, **PCM_STREAM)
    text = client.get("/metrics").text
    for family in ("vllm_omni:e2e_request_latency_s", "vllm_omni:request_queue_wait_s", "vllm_omni:audio_ttfp_s", "vllm_omni:audio_duration_s"):
        assert bucket_bounds(text, family) == SECONDS_BUCKETS, family
    assert bucket_bounds(text, "vllm_omni:audio_rtf") == RTF_BUCKETS
    assert bucket_bounds(text, "vllm_omni:audio_underrun_s") == SECONDS_FAST_BUCKETS


def test_num_requests_running_counts_requests_in_every_stage(low_latency: DeployProfile) -> None:
    # vllm_omni entrypoints/omni_base.py 414-432: running = dispatched - waiting in a scheduler,
    # so a request whose Stage 0 is done but whose last audio is still in Stage 1 runs.
    clock = VirtualClock()
    engine = Engine(StepModel(low_latency), clock)
    request = EngineRequest("r", prompt_tokens=80, total_frames=3)
    engine.submit(request)
    while engine.num_finishing == 0:
        wakeup = engine.next_wakeup()
        assert wakeup is not None
        clock.set(max(clock.now(), wakeup))
        engine.poll()
    assert (engine.num_running, engine.num_finishing) == (0, 1), "Stage 0 is done, Stage 1 still works"
    counts = EngineCounts(running=engine.num_running, waiting=engine.num_waiting, decoding=0, finishing=engine.num_finishing)
    metrics = EmulatorMetrics(MODEL, lambda: counts)
    assert sample(metrics.exposition().decode(), "vllm_omni:num_requests_running") == 1
    clock.set(engine.next_wakeup() or clock.now())
    assert [event.final for event in engine.poll()] == [True] and engine.num_finishing == 0


def test_prompt_and_generation_tokens_are_counted(client: TestClient, low_latency: DeployProfile) -> None:
    # vllm_omni metrics/prometheus.py 33-42 and 135-141; entrypoints/omni_base.py 696-704:
    # Stage 0's prompt tokens and every stage's output tokens, once per finished request.
    before = client.get("/metrics").text
    assert sample(before, "vllm_omni:prompt_tokens_total") == 0 == sample(before, "vllm_omni:generation_tokens_total")
    response = speak(client, response_format="pcm")
    text = client.get("/metrics").text
    assert sample(text, "vllm_omni:prompt_tokens_total") == StepModel(low_latency).prompt_tokens_for(TEXT)
    assert sample(text, "vllm_omni:generation_tokens_total") == int(response.headers["x-vllm-omni-output-tokens"])


def test_disable_log_stats_turns_the_statistics_off(low_latency: DeployProfile, tmp_path: Path) -> None:
    # vllm_omni entrypoints/openai/api_server.py 603 and 790 (log_stats = not
    # --disable-log-stats); metrics/prometheus.py 125-141 and metrics/modality.py 168-205:
    # every update returns early; children made up front stay at 0, the rest are absent,
    # and vLLM creates no stat logger for its own vllm:* series.
    args = build_parser().parse_args([MODEL, "--omni", "--deploy-config", "x", "--disable-log-stats"])
    assert emulator_settings(args, low_latency, tmp_path).log_stats is False
    assert emulator_settings(build_parser().parse_args([MODEL, "--omni", "--deploy-config", "x"]), low_latency, tmp_path).log_stats
    with TestClient(create_app(settings(low_latency, tmp_path, log_stats=False))) as quiet:
        speak(quiet, **PCM_STREAM)
        text = quiet.get("/metrics").text
    assert sample(text, "vllm_omni:num_requests_running") == 0
    assert sample(text, "vllm_omni:prompt_tokens_total") == 0 == sample(text, "vllm_omni:e2e_request_latency_s_count")
    for absent in ("vllm_omni:requests_success_total{", "vllm_omni:audio_ttfp_s_count{", "vllm:num_requests_running"):
        assert not metric_lines(text, absent), absent


# ---- answers -----------------------------------------------------------------------------------
def test_whole_file_answers_carry_every_token_header(client: TestClient, low_latency: DeployProfile) -> None:
    # vllm_omni entrypoints/openai/serving_speech.py 640-655 (_build_speech_usage_headers).
    response = speak(client, response_format="wav")
    text_tokens = StepModel(low_latency).text_tokens_for(TEXT)
    assert response.headers["x-vllm-omni-input-text-tokens"] == str(text_tokens)
    assert response.headers["x-vllm-omni-input-audio-tokens"] == "0"
    assert response.headers["x-vllm-omni-input-tokens"] == str(text_tokens)
    total = text_tokens + int(response.headers["x-vllm-omni-output-tokens"])
    assert response.headers["x-vllm-omni-total-tokens"] == str(total)


def test_usage_counts_the_text_and_instructions_never_the_reference_audio(client: TestClient, low_latency: DeployProfile) -> None:
    # vllm_omni entrypoints/openai/speech_usage.py 96-131: text tokens of input plus
    # non-blank instructions; audio tokens only for Qwen3-TTS in-context cloning (0 here).
    model = StepModel(low_latency)
    fields = {"stream": True, "response_format": "pcm", "instructions": "Calmly.", "ref_audio": data_uri(tone_wav(3.0))}
    done = sse_events(speak(client, **fields).text)[-1]
    expected = model.text_tokens_for(TEXT) + model.text_tokens_for("Calmly.")
    assert done["usage"]["input_tokens"] == expected
    assert done["usage"]["input_token_details"] == {"text_tokens": expected, "audio_tokens": 0}
    blank = sse_events(speak(client, stream=True, response_format="pcm", instructions="  ").text)[-1]
    assert blank["usage"]["input_tokens"] == model.text_tokens_for(TEXT)


# ---- request checks ----------------------------------------------------------------------------
def test_an_unknown_voice_with_ref_audio_is_ignored(client: TestClient) -> None:
    # vllm_omni entrypoints/openai/serving_speech.py 754-755 (_apply_uploaded_speaker).
    response = speak(client, voice="nobody", ref_audio=data_uri(tone_wav(2.0)), **PCM_STREAM)
    assert response.status_code == 200 and response.content


@pytest.mark.parametrize("voice", ["", " default ", "alloy"])
def test_a_voice_that_is_neither_default_nor_uploaded_is_a_400(client: TestClient, voice: str) -> None:
    # serving_speech.py 119-122 and 2526-2528: only "default" (any case, as sent) means no
    # voice; 757-781: anything else must be an uploaded voice (ValueError -> 400, 2700-2709).
    error = speak(client, voice=voice).json()["error"]
    assert error == {
        "message": f"Unknown voice '{voice}'. Higgs-Audio V3 has no built-in speakers. Upload a voice first via "
        "POST /v1/audio/voices, or use ref_audio + ref_text.",
        "type": "BadRequestError", "param": None, "code": 400,
    }  # fmt: skip
    assert speak(client, voice="DEFAULT", **PCM_STREAM).status_code == 200


def test_word_timestamps_over_http_is_a_400(client: TestClient) -> None:
    # serving_speech.py 2555-2565: streaming ones belong to the WebSocket path, the others
    # need --forced-aligner (which the emulator never has).
    streamed = speak(client, word_timestamps=True, **PCM_STREAM)
    assert streamed.status_code == 400 and "WebSocket /v1/audio/speech/stream" in streamed.json()["error"]["message"]
    whole = speak(client, word_timestamps=True)
    assert whole.status_code == 400 and "--forced-aligner" in whole.json()["error"]["message"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_declared_json_is_a_400(client: TestClient, content_type: str | None) -> None:
    # vllm entrypoints/serve/utils/api_utils.py 350-356 (validate_json_request, a dependency of
    # the route: vllm_omni api_server.py 1338-1340), rendered by handlers/validation.py 149-195.
    headers = {"content-type": content_type} if content_type else {}
    response = client.post("/v1/audio/speech", content=json.dumps({"input": TEXT}), headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        "type": "Bad Request", "param": None, "code": 400,
    }  # fmt: skip


def test_validation_errors_have_type_bad_request(client: TestClient) -> None:
    # vllm entrypoints/serve/exception_handling/handlers/validation.py 158-195.
    error = speak(client, max_new_tokens=0).json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("Bad Request", 400, "body.max_new_tokens")
    assert error["message"].startswith("1 validation error:\n  {'type': 'greater_than_equal', 'loc': 'body.max_new_tokens'")
    assert client.post("/v1/audio/speech", json={"model": "x"}).json()["error"]["param"] == "body.input"


def test_sample_rate_is_refused_before_the_model_is_checked(client: TestClient) -> None:
    # serving_speech.py 2530-2540: _validate_speech_sample_rate, then _check_model; the Higgs
    # adapter lists no supported output rate (tts_adapters/base.py 222).
    error = speak(client, model="not-served", sample_rate=24000).json()["error"]
    assert error == {"message": "sample_rate is not supported by the current TTS model", "type": "BadRequestError", "param": None, "code": 400}
    assert speak(client, model="not-served").status_code == 404


def test_models_are_owned_by_vllm_with_one_permission(client: TestClient) -> None:
    # vllm entrypoints/serve/engine/protocol.py 90-113 (ModelCard, ModelPermission);
    # entrypoints/openai/models/serving.py 64-77.
    [card] = client.get("/v1/models").json()["data"]
    assert (card["id"], card["owned_by"], card["root"], card["max_model_len"]) == (MODEL, "vllm", MODEL, 8192)
    [permission] = card["permission"]
    assert permission["id"].startswith("modelperm-") and permission["object"] == "model_permission"
    assert (permission["allow_sampling"], permission["organization"], permission["is_blocking"]) == (True, "*", False)


# ---- reference audio ---------------------------------------------------------------------------
def generation_failed(response: Any) -> str:
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("InternalServerError", None, 500)
    return str(error["message"])


def test_a_file_uri_reference_is_a_500(client: TestClient, tmp_path: Path) -> None:
    # vllm multimodal/media/connector.py 333-342 (no --allowed-local-media-path), answered by
    # vllm_omni serving_speech.py 2720-2733 as "Speech generation failed: ...".
    clip = tmp_path / "clip.wav"
    clip.write_bytes(tone_wav(2.0))
    message = generation_failed(speak(client, ref_audio=clip.as_uri()))
    assert message == "Speech generation failed: Cannot load local files without `--allowed-local-media-path`."


def test_a_reference_url_is_fetched_and_measured(client: TestClient, clips: ClipServer) -> None:
    # vllm multimodal/media/connector.py 424-452 (load_from_url_async); vllm_omni
    # serving_speech.py 1298-1381 (_resolve_ref_audio_array, _finalize_fetched_ref_audio).
    before = clips.hits["/clip.wav"]
    response = speak(client, ref_audio=f"{clips.url}/clip.wav", **PCM_STREAM)
    assert response.status_code == 200 and response.content
    assert clips.hits["/clip.wav"] == before + 1
    short = speak(client, ref_audio=f"{clips.url}/short.wav").json()["error"]
    assert short["message"] == "Reference audio too short (0.4s). At least 1s of clear speech is required."
    assert short["code"] == 400


def test_a_reference_url_that_cannot_be_fetched_fails_as_on_the_real_worker(client: TestClient, clips: ClipServer) -> None:
    # vllm multimodal/media/connector.py 380-398 and 430-452 (_wrap_media_fetch_error: a
    # remote 4xx), connections.py 154-198 and 278-330 (three tries for refusals and 5xx),
    # answered by vllm_omni serving_speech.py 2720-2733 as a 500.
    missing = f"{clips.url}/missing.wav"
    assert generation_failed(speak(client, ref_audio=missing)) == (
        f"Speech generation failed: Failed to fetch media from URL: HTTP 404 error (parameter=image_url, value={missing})"
    )
    port = free_port()  # nothing listens there
    refused = generation_failed(speak(client, ref_audio=f"http://127.0.0.1:{port}/a.wav"))
    assert refused.startswith(f"Speech generation failed: Cannot connect to host 127.0.0.1:{port} ssl:default")
    before = clips.hits["/broken.wav"]
    broken = generation_failed(speak(client, ref_audio=f"{clips.url}/broken.wav"))
    assert broken.startswith("Speech generation failed: 500, message='Internal Server Error'")
    assert clips.hits["/broken.wav"] == before + 3, "a remote 5xx is tried three times"


def test_a_reference_clip_over_the_size_limit_fails_as_on_the_real_worker(client: TestClient, clips: ClipServer) -> None:
    # vllm connections.py 33-44 and 87-99 (HTTPResponseSizeExceededError on the declared
    # length, VLLM_MAX_AUDIO_CLIP_FILESIZE_MB = 25), a 500 through serving_speech.py 2720-2733.
    message = generation_failed(speak(client, ref_audio=f"{clips.url}/huge.wav"))
    assert message == (
        "Speech generation failed: Maximum file size exceeded: HTTP response exceeded maximum size of "
        f"{25 * 1024 * 1024} bytes (received at least {HUGE_BYTES} bytes) "
        f"(parameter=audio_filesize_mb, value={HUGE_BYTES / 1024 / 1024})"
    )
