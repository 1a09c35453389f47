"""``higgs-gateway state migrate`` round-trips a data directory through a real Redis."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gateway.config import RoutingConfig
from gateway.routing.thresholds import ThresholdStore
from gateway.voices.store import VoiceStore
from tests.support.audio import reference_wav
from tests.support.procs import GATEWAY_CLI
from tests.support.redis_server import running_redis


def migrate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GATEWAY_CLI, "state", "migrate", *args], capture_output=True, text=True, timeout=120)


def test_a_data_directory_round_trips_through_redis(tmp_path: Path) -> None:
    source, back = tmp_path / "source", tmp_path / "back"
    ThresholdStore.in_data_dir(source, RoutingConfig()).update({"thresholds": {"balanced_threshold": 321}})
    (source / "drained.json").write_text(json.dumps(["high_throughput-1"]))
    voices = VoiceStore.in_data_dir(source)
    audio = reference_wav()
    voices.add("Narrator", audio, consent="true", ref_text="Hello there.")
    voices.add("second", reference_wav(pitch_hz=220.0), consent="record-42")

    with running_redis(tmp_path / "redis") as redis:
        there = migrate("--from-dir", str(source), "--to", redis.url, "--key-prefix", "t:")
        assert there.returncode == 0, there.stderr
        assert "voices copied:     2" in there.stdout
        again = migrate("--from-dir", str(source), "--to", redis.url, "--key-prefix", "t:")
        assert again.returncode == 0 and "voices present:    2" in again.stdout, again.stdout  # re-runnable
        home = migrate("--from", redis.url, "--to-dir", str(back), "--key-prefix", "t:")
        assert home.returncode == 0, home.stderr

    restored = ThresholdStore.in_data_dir(back, RoutingConfig())
    assert restored.current().thresholds.balanced_threshold == 321
    assert json.loads((back / "drained.json").read_text()) == ["high_throughput-1"]
    copy = VoiceStore.in_data_dir(back)
    assert copy.list() == voices.list()
    for voice in voices.list():
        assert copy.read_audio(voice) == voices.read_audio(voice)


def test_an_unreachable_redis_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "source").mkdir()
    result = migrate("--from-dir", str(tmp_path / "source"), "--to", "redis://127.0.0.1:1/0")
    assert result.returncode == 2
    assert "unavailable" in result.stderr
