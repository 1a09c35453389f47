"""Wiring of the emulated worker's app (no server started)."""

from __future__ import annotations

from pathlib import Path

from gateway.worker.profile import DeployProfile
from gateway.emulator.app import EmulatorSettings, create_app


def test_a_warm_eager_worker_starts_with_every_graph_captured(high_throughput: DeployProfile, tmp_path: Path) -> None:
    app = create_app(EmulatorSettings(model="m", profile=high_throughput, voices_dir=tmp_path, warm=True))
    assert app.state.engine.captured == set(range(1, 65))
    cold = create_app(EmulatorSettings(model="m", profile=high_throughput, voices_dir=tmp_path))
    assert cold.state.engine.captured == set()


def test_served_name_defaults_to_the_model(low_latency: DeployProfile, tmp_path: Path) -> None:
    assert EmulatorSettings(model="m", profile=low_latency, voices_dir=tmp_path).names == ("m",)
    named = EmulatorSettings(model="m", profile=low_latency, voices_dir=tmp_path, served_model_names=("a", "b"))
    assert named.names == ("a", "b")


def test_audio_faults_through_the_api_degrade_the_streams_from_their_concurrency(low_latency: DeployProfile, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from gateway.quality.score import Floors, Verdict, score_pcm

    settings = EmulatorSettings(model="m", profile=low_latency, voices_dir=tmp_path, time_scale=0.001)
    body = {"input": "The quick brown fox jumps over the lazy dog.", "response_format": "pcm", "stream_format": "audio"}
    with TestClient(create_app(settings)) as http:
        assert score_pcm(http.post("/v1/audio/speech", json=body).content).verdict(Floors()) is Verdict.OK
        for field, verdict in (("noisy_from", Verdict.NOISY), ("silent_from", Verdict.SILENT), ("clipped_from", Verdict.CLIPPED)):
            answer = http.post("/emulator/faults", json={"clear": True, field: 1})
            assert answer.status_code == 200 and answer.json()[field] == 1
            assert score_pcm(http.post("/v1/audio/speech", json=body).content).verdict(Floors()) is verdict
        http.post("/emulator/faults", json={"clipped_from": 2})  # one request alone is below it
        assert score_pcm(http.post("/v1/audio/speech", json=body).content).verdict(Floors()) is Verdict.OK
        assert http.post("/emulator/faults", json={"noisy_from": 0}).status_code == 400
