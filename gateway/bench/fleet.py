"""Start and stop the processes a benchmark needs: emulated workers, gateways, nginx.

Every process runs in its own session with its output in a log file, can be pinned to
CPU cores (so the gateway's cost is not blurred by the load generator on a small box),
and is stopped with SIGTERM (then SIGKILL) when the ``Fleet`` closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from gateway.config import DEFAULT_MODEL

GATEWAY_CLI = [sys.executable, "-m", "gateway"]
LL_PROFILE = "higgs_multimodal_qwen3_low_latency.yaml"
HT_PROFILE = "higgs_multimodal_qwen3_high_throughput.yaml"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    name: str
    popen: subprocess.Popen[bytes]
    url: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)


def emulator_command(port: int, profile: str, time_scale: float, extra: Sequence[str] = ()) -> list[str]:
    """An emulated worker, with the same flags a real ``vllm-omni serve`` takes.

    ``--synthetic-audio``: benchmark workers send the cheap synthetic signal instead of
    speaking the text with eSpeak, so no benchmark timing (or the CPU the workers share
    with the gateway) ever pays for speech synthesis; the timing model is the same.
    """
    return [
        *GATEWAY_CLI, "emulate", DEFAULT_MODEL, "--omni", "--trust-remote-code",
        "--deploy-config", profile, "--host", "127.0.0.1", "--port", str(port),
        "--log-stats", "--enable-server-load-tracking", "--time-scale", str(time_scale),
        "--synthetic-audio", *extra,
    ]  # fmt: skip


class Fleet:
    """The processes of one benchmark configuration; closing it stops them all."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.services: list[Service] = []

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        for service in reversed(self.services):
            service.stop()
        self.services.clear()

    def start(
        self,
        name: str,
        args: Sequence[str],
        url: str,
        ready_path: str,
        cpus: set[int] | None = None,
        timeout_s: float = 60.0,
    ) -> Service:
        """Start ``args``, pinned to ``cpus`` if given, and wait until ``url+ready_path`` answers 200."""
        log_path = self.work_dir / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        pin = _pinner(cpus)
        with log_path.open("wb") as log:
            popen = subprocess.Popen(  # noqa: S603 - our own commands
                list(args), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=pin
            )
        service = Service(name, popen, url, log_path)
        self.services.append(service)
        wait_http(url + ready_path, timeout_s, service)
        return service

    def emulator(self, name: str, profile: str, time_scale: float, cpus: set[int] | None = None,
                 extra: Sequence[str] = ()) -> Service:  # fmt: skip
        port = free_port()
        voices = ["--voices-dir", str(self.work_dir / f"{name}-voices")]
        args = emulator_command(port, profile, time_scale, [*extra, *voices])
        return self.start(name, args, f"http://127.0.0.1:{port}", "/health", cpus)

    def redis(self, name: str = "redis") -> str:
        """A throw-away redis-server (no persistence) for replicas to share; its URL."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian: apt-get install redis-server)")
        port = free_port()
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.work_dir)]  # fmt: skip
        log_path = self.work_dir / f"{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # noqa: S603
        service = Service(name, popen, f"redis://127.0.0.1:{port}/0", log_path)
        self.services.append(service)
        deadline = time.monotonic() + 20.0
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return service.url
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start:\n{service.log_tail()}")
            time.sleep(0.05)

    def gateway(self, name: str, config_path: Path, port: int, cpus: set[int] | None = None,
                ready_path: str = "/health") -> Service:  # fmt: skip
        args = [*GATEWAY_CLI, "serve", "--config", str(config_path)]
        return self.start(name, args, f"http://127.0.0.1:{port}", ready_path, cpus)


def _pinner(cpus: set[int] | None) -> Callable[[], None] | None:
    if not cpus:
        return None
    available = os.sched_getaffinity(0)
    chosen = {cpu for cpu in cpus if cpu in available} or available

    def pin() -> None:  # runs in the child before exec, so every thread inherits it
        os.sched_setaffinity(0, chosen)

    return pin


def wait_http(url: str, timeout_s: float, service: Service | None = None) -> None:
    """Poll until ``url`` answers 200; fail early with the log if the process died."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if service is not None and service.popen.poll() is not None:
            raise RuntimeError(f"{service.name} exited with {service.popen.returncode}:\n{service.log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            response = httpx.get(url, timeout=2.0)
            if response.status_code == 200:
                return
            last = response.status_code
        time.sleep(0.1)
    tail = service.log_tail() if service else ""
    raise TimeoutError(f"{url} did not answer 200 within {timeout_s:.0f}s (last: {last})\n{tail}")


def wait_speech(url: str, timeout_s: float = 60.0, headers: dict[str, str] | None = None) -> None:
    """Until one short streamed request succeeds: the gateway has routable workers."""
    from gateway.bench.client import speech_url

    body = {"model": DEFAULT_MODEL, "input": "Ready.", "voice": "default", "response_format": "pcm",
            "stream_format": "audio"}  # fmt: skip
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            response = httpx.post(speech_url(url), json=body, headers=headers, timeout=30.0)
            if response.status_code == 200 and response.content:
                return
            last = f"{response.status_code} {response.text[:200]}"
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"{url} served no speech within {timeout_s:.0f}s (last: {last})")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (``/proc/<pid>/stat``), threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    # Fields after the command name start at index 3 (state); utime and stime are 14 and 15.
    return (int(fields[11]) + int(fields[12])) / ticks


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and all its live descendants (nginx's workers, say)."""
    total = cpu_seconds(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                total += tree_cpu_seconds(int(child))
    return total
