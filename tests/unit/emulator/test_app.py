"""Wiring of the emulated worker's app (no server started)."""

from __future__ import annotations

from pathlib import Path

from gateway.deploy_profile import DeployProfile
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
