"""Real processes for integration tests: free ports, start, wait until HTTP answers, stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

GATEWAY_CLI = [sys.executable, "-m", "gateway"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def json_lines(self) -> list[dict[str, Any]]:
        """The log's JSON lines, whole ones only: the process may be writing the last as it is read."""
        text = self.log()
        complete = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
        return [json.loads(line) for line in complete if line.startswith("{")]

    def stop(self, timeout: float = 10.0) -> None:
        stop_process(self.popen, timeout)


def stop_process(popen: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if popen.poll() is not None:
        return
    popen.send_signal(signal.SIGTERM)
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(5)


def wait_http(url: str, timeout: float = 30.0, popen: subprocess.Popen[bytes] | None = None, log_path: Path | None = None) -> None:
    """Poll ``url`` until it answers 200; fail early if the process died."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if popen is not None and popen.poll() is not None:
            log = log_path.read_text(errors="replace") if log_path else ""
            raise RuntimeError(f"process exited with {popen.returncode} before {url} answered:\n{log[-4000:]}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError as exc:
            last_error = exc
        time.sleep(0.05)
    log = log_path.read_text(errors="replace") if log_path else ""
    raise TimeoutError(f"{url} did not answer 200 within {timeout}s ({last_error}):\n{log[-4000:]}")


@contextmanager
def running(
    args: Sequence[str],
    ready_url: str,
    log_path: Path,
    base_url: str,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Iterator[Proc]:
    """Start ``args``, wait for ``ready_url`` to answer 200, stop the process afterwards."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("wb") as log:
        popen = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
    proc = Proc(popen, base_url, log_path)
    try:
        wait_http(ready_url, timeout, popen, log_path)
        yield proc
    finally:
        proc.stop()


def emulator_args(
    port: int,
    profile: str = "higgs_multimodal_qwen3_low_latency.yaml",
    time_scale: float = 0.05,
    extra: Sequence[str] = (),
    load_tracking: bool = True,
) -> list[str]:
    """The emulator's command line: the same flags a real ``vllm-omni serve`` takes."""
    tracking = ["--enable-server-load-tracking"] if load_tracking else []
    return [
        *GATEWAY_CLI, "emulate", "bosonai/higgs-audio-v3-tts-4b", "--omni", "--trust-remote-code",
        "--deploy-config", profile, "--host", "127.0.0.1", "--port", str(port),
        "--log-stats", *tracking, "--time-scale", str(time_scale), *extra,
    ]  # fmt: skip


@contextmanager
def running_emulator(
    tmp_path: Path,
    profile: str = "higgs_multimodal_qwen3_low_latency.yaml",
    time_scale: float = 0.05,
    extra: Sequence[str] = (),
    name: str = "worker",
    load_tracking: bool = True,
) -> Iterator[Proc]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    voices = ["--voices-dir", str(tmp_path / f"{name}-voices")]
    args = emulator_args(port, profile, time_scale, [*extra, *voices], load_tracking)
    with running(args, f"{url}/health", tmp_path / f"{name}.log", url) as proc:
        yield proc
