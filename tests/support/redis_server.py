"""A real ``redis-server`` for tests: Debian's package (installed when missing), one
process per fixture on a free 127.0.0.1 port with its own directory, no persistence.
``kill()`` and ``start()`` again (same port, data lost) stand in for a Redis outage.
``password`` and ``args`` run it as the manifests do (``--requirepass``, ``--maxmemory``)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.debian import debian_tool
from tests.support.procs import free_port


def redis_server_bin() -> str:
    return debian_tool(lambda: shutil.which("redis-server"), "redis-server")


class RedisServer:
    def __init__(self, directory: Path, *, password: str | None = None, args: Sequence[str] = ()) -> None:
        self.directory = directory
        self.password = password
        self._args = [*args, *(["--requirepass", password] if password else [])]
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._binary = redis_server_bin()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> None:
        assert self._proc is None, "already running"
        log = open(self.directory / "redis.log", "ab")  # noqa: SIM115 - handed to the process
        self._proc = subprocess.Popen(
            [
                self._binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.directory),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
                *self._args,
            ],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.directory / 'redis.log').read_text()[-2000:]}")
            if self.ping():
                return
            time.sleep(0.05)
        raise TimeoutError(f"redis-server not answering on port {self.port}")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                if self.password:
                    sock.sendall(f"AUTH {self.password}\r\n".encode())
                    if not sock.recv(16).startswith(b"+OK"):
                        return False
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the outage a crashed or partitioned Redis looks like to the gateway."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def running_redis(directory: Path, *, password: str | None = None, args: Sequence[str] = ()) -> Iterator[RedisServer]:
    server = RedisServer(directory, password=password, args=args)
    server.start()
    try:
        yield server
    finally:
        server.kill()
