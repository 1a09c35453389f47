"""``higgs-gateway demo`` stopped as a newcomer stops it: Ctrl-C in its terminal.

A terminal's Ctrl-C sends SIGINT to the foreground process group: the gateway's (each
emulated worker leads its own session, so the gateway stops them itself). A clean stop is no
outage: nothing at WARNING or above, no traceback (it once logged "degraded" and "no pool can
serve" for the pools the stop itself emptied).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.integration.conftest import speech_body
from tests.support.procs import GATEWAY_CLI, Proc, free_port, wait_http

START_S = 90.0  # both emulated workers started and warm, on a busy machine
STOP_S = 30.0


def test_ctrl_c_on_the_demo_logs_no_warning_or_error(tmp_path: Path) -> None:
    port = free_port()
    args = [*GATEWAY_CLI, "demo", "--port", str(port), "--time-scale", "0.05", "--log-format", "json",
            "--data-dir", str(tmp_path / "data")]  # fmt: skip
    log_path = tmp_path / "demo.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True
        )
    demo = Proc(popen, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_http(f"{demo.url}/ready", START_S, popen, log_path)  # the demo's /ready: every pool warm
        for fmt in ("mp3", "pcm"):  # served streams, so the stop follows real traffic
            response = httpx.post(f"{demo.url}/v1/audio/speech", json=speech_body(response_format=fmt), timeout=60)
            assert response.status_code == 200, response.text
        os.killpg(popen.pid, signal.SIGINT)  # Ctrl-C
        assert popen.wait(STOP_S) == 0, demo.log()[-4000:]
    finally:
        if popen.poll() is None:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(5)
    lines = demo.json_lines()
    assert any("Finished server process" in line["msg"] for line in lines), demo.log()[-4000:]
    loud = [f"{line['level']} {line['logger']}: {line['msg']}" for line in lines if line["level"] not in ("DEBUG", "INFO")]
    assert loud == [], "\n".join(loud)
    assert "Traceback" not in demo.log()
