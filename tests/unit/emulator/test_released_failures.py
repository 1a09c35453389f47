"""The emulated worker fails where and how the released vllm-omni 0.30.0 worker fails.

Each test names the released lines it holds the emulator to (see the modules' docstrings).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gateway.worker.profile import DeployProfile
from gateway.emulator.app import create_app
from gateway.emulator.engine_death import ENGINE_DEAD_MESSAGE
from gateway.emulator.ref_cache import CODE_CACHE_MAX_ENTRIES, ReferenceCaches, ResolvedClip
from gateway.worker.timing import StepModel
from tests.support.clip_server import clip_server, tone_wav
from tests.unit.emulator.test_released_worker_fidelity import PCM_STREAM, settings

TEXT = "The quick brown fox jumps over the lazy dog."
# CJK extension B: 3 tokens a character (byte fallback), 2800 of them pass 8192 tokens.
OVERLONG = "\U00020000" * 2800


@pytest.fixture
def app(low_latency: DeployProfile, tmp_path: Path) -> Any:
    return create_app(settings(low_latency, tmp_path))


@pytest.fixture
def client(app: Any) -> Iterator[TestClient]:
    with TestClient(app) as http:
        yield http


def exchange(app: Any, body: dict[str, Any], disconnect_at_once: bool = False) -> tuple[int | None, list[bytes], bool]:
    """(status, body messages, whether the app raised) of one ASGI request, as a server sees it."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/audio/speech", "raw_path": b"/v1/audio/speech", "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
        "server": ("worker.test", 80), "client": ("127.0.0.1", 1),
    }  # fmt: skip
    status: list[int] = []
    sent: list[bytes] = []
    raised = False

    async def run() -> None:
        nonlocal raised
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": raw, "more_body": False}
            if not disconnect_at_once:
                await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif message["type"] == "http.response.body" and message.get("body"):
                sent.append(bytes(message["body"]))

        try:
            await app(scope, receive, send)
        except Exception:  # a body that raises: the server drops the connection
            raised = True

    asyncio.run(run())
    return (status[0] if status else None), sent, raised


def load(client: TestClient) -> int:
    return int(client.get("/load").json()["server_load"])


# ---- over-long prompts (input_processor.py 440-485, after the 200: serving_speech.py 2064, 2576-2591) ----
def test_an_overlong_prompt_is_a_200_then_a_cut_raw_stream_with_no_byte(app: Any, low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    assert model.prompt_tokens_for(OVERLONG) >= 8192 == model.max_model_len
    status, sent, raised = exchange(app, {"input": OVERLONG, **PCM_STREAM})
    assert (status, sent, raised) == (200, [], True)
    # A WAV stream sends its header with the first chunk, so not even the header goes out.
    assert exchange(app, {"input": OVERLONG, "stream_format": "audio", "response_format": "wav"})[:2] == (200, [])


def test_an_overlong_prompt_over_sse_is_an_error_event_and_whole_file_a_500(client: TestClient) -> None:
    tokens = StepModel(client.app.state.settings.profile).prompt_tokens_for(OVERLONG)  # type: ignore[attr-defined]
    expected = (
        f"The decoder prompt (length {tokens}) is longer than the maximum model length of 8192. "
        "Make sure that `max_model_len` is no smaller than the number of text tokens."
    )
    sse = client.post("/v1/audio/speech", json={"input": OVERLONG, "stream": True, "response_format": "pcm"})
    assert sse.status_code == 200  # serving_speech.py 1876-1890: the error travels as an event
    events = [json.loads(line[6:]) for line in sse.text.splitlines() if line.startswith("data: ")]
    assert events == [{"type": "speech.audio.error", "error": {"message": expected, "type": "server_error", "param": None, "code": 500}}]
    whole = client.post("/v1/audio/speech", json={"input": OVERLONG})
    assert whole.status_code == 500  # VLLMValidationError is no ValueError: serving_speech.py 2720-2733
    assert whole.json()["error"] == {"message": f"Speech generation failed: {expected}", "type": "InternalServerError", "param": None, "code": 500}
    assert client.post("/v1/audio/speech", json={"input": TEXT}).status_code == 200  # the worker is fine


def test_a_prompt_of_exactly_max_model_len_is_refused_too(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    assert not model.prompt_fits(8192) and model.prompt_fits(8191)


def test_cjk_text_of_4096_characters_fits(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", json={"input": "中" * 4096, "max_new_tokens": 20, **PCM_STREAM})
    assert response.status_code == 200 and len(response.content) > 0


# ---- engine death (serve/utils/errors.py 24-64, launcher.py 187-209) ------------------------------
def test_engine_death_is_a_500_with_the_real_body_then_the_server_stops(app: Any) -> None:
    stops: list[bool] = []
    app.state.engine_life.stop_serving = lambda: stops.append(True)
    with TestClient(app) as client:
        assert client.post("/emulator/faults", json={"engine_dead": True}).json()["engine_dead"] is True
        for body in ({"input": TEXT}, {"input": TEXT, **PCM_STREAM}, {"input": TEXT, "stream": True, "response_format": "pcm"}):
            response = client.post("/v1/audio/speech", json=body)
            assert response.status_code == 500  # before any stream starts, in every mode
            assert response.json() == {
                "error": {"message": ENGINE_DEAD_MESSAGE, "type": "InternalServerError", "param": None, "code": 500,
                          "request_id": None, "error_stage_id": None}
            }  # fmt: skip
        assert len(stops) >= 3  # terminate_if_errored on each (server.should_exit), and the watchdog's
        assert client.get("/health").status_code == 503
        # Clearing the faults does not bring a dead engine back.
        client.post("/emulator/faults", json={"clear": True})
        assert client.post("/v1/audio/speech", json={"input": TEXT}).status_code == 500


def test_the_watchdog_stops_a_dead_server_that_gets_no_request() -> None:
    from gateway.emulator.engine_death import EngineLife

    async def run() -> None:
        life = EngineLife(time_scale=0.001)  # 5 s, scaled
        stopped = asyncio.Event()
        life.stop_serving = stopped.set
        life.die()
        await asyncio.wait_for(stopped.wait(), timeout=10)

    asyncio.run(run())


def test_keep_alive_on_engine_death_keeps_the_server_listening() -> None:
    from gateway.emulator.engine_death import EngineLife

    life = EngineLife(env={"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"})
    stops: list[bool] = []
    life.stop_serving = lambda: stops.append(True)
    life.dead = True
    life.terminate()
    assert stops == []


def test_engine_death_fails_the_requests_in_flight(low_latency: DeployProfile, tmp_path: Path) -> None:
    # A whole-file request in flight answers 500 with the stage that died; a raw stream is cut.
    app = create_app(settings(low_latency, tmp_path, time_scale=1.0))
    stops: list[bool] = []
    app.state.engine_life.stop_serving = lambda: stops.append(True)

    async def run() -> tuple[Any, Any]:
        import httpx

        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://worker") as http:
            whole = asyncio.ensure_future(http.post("/v1/audio/speech", json={"input": TEXT * 3}))
            while app.state.engine.num_running == 0:
                await asyncio.sleep(0.01)
            await http.post("/emulator/faults", json={"engine_dead": True})
            return await whole, app.state.engine_life.dead

    response, dead = asyncio.run(run())
    assert dead and response.status_code == 500
    assert response.json()["error"]["error_stage_id"] == 0 and response.json()["error"]["request_id"] is None
    assert stops  # handling the in-flight failure stopped the server


# ---- voice clones and the reference caches (serving_speech.py 694-804, higgs_audio_v3.py 22-160) -----
def upload(client: TestClient, name: str, seconds: float, ref_text: str | None = None) -> None:
    data = {"name": name, "consent": "ok"} | ({"ref_text": ref_text} if ref_text else {})
    response = client.post("/v1/audio/voices", data=data, files={"audio_sample": ("v.wav", tone_wav(seconds), "audio/wav")})
    assert response.status_code == 200, response.text


def prompt_tokens_total(client: TestClient) -> float:
    line = next(line for line in client.get("/metrics").text.splitlines() if line.startswith("vllm_omni:prompt_tokens_total"))
    return float(line.rsplit(" ", 1)[1])


def test_an_uploaded_voice_is_a_voice_clone_of_its_clip_and_ref_text(client: TestClient, low_latency: DeployProfile) -> None:
    upload(client, "Anna", 4.0, ref_text="Hello from Anna.")
    before = prompt_tokens_total(client)
    assert client.post("/v1/audio/speech", json={"input": TEXT, "voice": "anna"}).status_code == 200
    model = StepModel(low_latency)
    grown = prompt_tokens_total(client) - before
    # build_prompt: <|tts|> <|ref_text|> ref text <|ref_audio|> 25 x 4 s + 7 rows <|text|> text <|audio|>
    assert grown == 3 + model.text_tokens_for(TEXT) + 1 + model.text_tokens_for("Hello from Anna.") + 1 + 100 + 7
    caches = client.get("/emulator/info").json()["reference_caches"]
    assert caches["resolved_audio_entries"] == 1 and caches["reference_code_entries"] == 1
    assert (caches["reference_code_hits"], caches["reference_code_misses"]) == (0, 1)
    assert client.post("/v1/audio/speech", json={"input": TEXT, "voice": "anna"}).status_code == 200
    # A repeat encodes nothing: the same entries, one hit more.
    assert client.get("/emulator/info").json()["reference_caches"] == {**caches, "reference_code_hits": 1}


def test_a_cached_url_keeps_working_after_its_host_went_down(client: TestClient) -> None:
    with clip_server() as clips:
        url = clips.url + "/clip.wav"
        assert client.post("/v1/audio/speech", json={"input": TEXT, "ref_audio": url}).status_code == 200
    assert client.post("/v1/audio/speech", json={"input": TEXT, "ref_audio": url}).status_code == 200
    assert clips.hits["/clip.wav"] == 1
    uncached = client.post("/v1/audio/speech", json={"input": TEXT, "ref_audio": clips.url + "/other.wav"})
    assert uncached.status_code == 500  # the host is gone for anything not cached


def test_inline_ref_audio_is_encoded_once() -> None:
    caches = ReferenceCaches()
    clip = ResolvedClip(6.0, 24000, "clip-a")
    assert caches.encode_wait(clip, 157, now=0.0, encode_seconds=0.036) == 0.036  # a miss encodes
    assert caches.encode_wait(clip, 157, now=0.010, encode_seconds=0.036) == pytest.approx(0.026)  # in flight: wait for it
    assert caches.encode_wait(clip, 157, now=1.0, encode_seconds=0.036) == 0.0  # cached: nothing


def test_the_code_cache_keeps_256_entries_least_recently_used_first() -> None:
    caches = ReferenceCaches()
    for index in range(CODE_CACHE_MAX_ENTRIES + 1):
        caches.encode_wait(ResolvedClip(3.0, 24000, f"clip-{index}"), 82, now=0.0, encode_seconds=0.01)
    assert len(caches.codes) == CODE_CACHE_MAX_ENTRIES and "clip-0" not in caches.codes
    assert caches.codes.bytes == CODE_CACHE_MAX_ENTRIES * 82 * 8 * 8


def test_the_resolve_cache_holds_512_mb_of_float32_samples() -> None:
    caches = ReferenceCaches()
    big = ResolvedClip(30.0, 48000, "x")  # 5.76 MB: 93 fit in 512 MB
    for index in range(100):
        caches.resolved.put(f"url-{index}", big, big.nbytes)
    assert len(caches.resolved) == 512 * 1024 * 1024 // big.nbytes


# ---- voice uploads stall the event loop (serving_speech.py 948, 985; 694-718 on first use) ----------
def test_an_upload_and_a_voices_first_use_block_the_loop_for_their_modelled_time(
    client: TestClient, low_latency: DeployProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked: list[float] = []
    import gateway.emulator.app as app_module
    import gateway.emulator.speech as speech_module

    monkeypatch.setattr(app_module.time, "sleep", blocked.append)
    monkeypatch.setattr(speech_module.time, "sleep", blocked.append)
    model = StepModel(low_latency)
    upload(client, "Bea", 10.0)
    assert blocked == [pytest.approx(model.voice_upload_block_seconds(10.0) * 0.001)]
    client.post("/v1/audio/speech", json={"input": TEXT, "voice": "bea"})
    client.post("/v1/audio/speech", json={"input": TEXT, "voice": "bea"})
    assert blocked[1:] == [pytest.approx(model.voice_first_use_block_seconds(10.0) * 0.001)]  # memoized after
    assert model.voice_upload_block_seconds(10.0) == pytest.approx(0.028)  # tens of ms per clip


# ---- /load leaks (api_utils.py load_aware_call 100-145), as an opt-in fault --------------------------
def test_load_leaks_when_a_raw_stream_fails_after_its_200(app: Any) -> None:
    with TestClient(app) as client:
        client.post("/emulator/faults", json={"cut_after_chunks": 1})
        exchange(app, {"input": TEXT, **PCM_STREAM})
        assert load(client) == 0  # by default the emulator counts it out
        client.post("/emulator/faults", json={"leak_load": True})
        exchange(app, {"input": TEXT, **PCM_STREAM})
        exchange(app, {"input": TEXT, "stream": True, "response_format": "pcm"})  # SSE ends normally: no leak
        assert load(client) == 1


def test_load_leaks_when_the_client_leaves_before_the_handler_returns(app: Any) -> None:
    with TestClient(app) as client:
        client.post("/emulator/faults", json={"leak_load": True})
        assert exchange(app, {"input": TEXT}, disconnect_at_once=True)[0] == 499
        assert load(client) == 1
        client.post("/emulator/faults", json={"leak_load": False})
        exchange(app, {"input": TEXT}, disconnect_at_once=True)
        assert load(client) == 1


def test_data_uri_ref_audio_is_resolved_once(client: TestClient) -> None:
    uri = "data:audio/wav;base64," + base64.b64encode(tone_wav(2.0)).decode()
    for _ in range(3):
        assert client.post("/v1/audio/speech", json={"input": TEXT, "ref_audio": uri}).status_code == 200
    caches = client.get("/emulator/info").json()["reference_caches"]
    assert caches["resolved_audio_entries"] == 1 and caches["reference_code_entries"] == 1
    assert (caches["reference_code_hits"], caches["reference_code_misses"]) == (2, 1)
