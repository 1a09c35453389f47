"""Engine death in a real emulated worker process: a 500 with the real body, then nothing.

The released worker (vllm launcher.py terminate_if_errored, serve/utils/errors.py 24-64)
answers the request that meets the dead engine, stops listening and exits; the emulator
process does the same, so a client meets a refused connection and a supervisor an exit.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.procs import running_emulator

TEXT = "The quick brown fox jumps over the lazy dog."


def test_after_engine_death_the_worker_answers_500_then_refuses_connections(tmp_path: Path) -> None:
    with running_emulator(tmp_path, time_scale=0.02) as proc:
        with httpx.Client(base_url=proc.url, timeout=30) as client:
            assert client.post("/v1/audio/speech", json={"input": TEXT}).status_code == 200
            assert client.post("/emulator/faults", json={"engine_dead": True}).status_code == 200
            response = client.post("/v1/audio/speech", json={"input": TEXT, "stream_format": "audio", "response_format": "pcm"})
            assert response.status_code == 500
            error = response.json()["error"]
            assert error["type"] == "InternalServerError" and error["request_id"] is None and error["error_stage_id"] is None
        # The process exits by itself (no signal): a supervisor sees an exit and restarts it.
        assert proc.popen.wait(timeout=20) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{proc.url}/health", timeout=5)


def test_a_dead_engine_with_no_request_stops_within_the_watchdog_period(tmp_path: Path) -> None:
    with running_emulator(tmp_path, time_scale=0.02) as proc:
        assert httpx.post(f"{proc.url}/emulator/faults", json={"engine_dead": True}, timeout=10).status_code == 200
        assert proc.popen.wait(timeout=20) == 0  # 5 s watchdog, scaled
