"""``server.processes`` > 1: several gateway processes on one host, each an ordinary replica.

One listening socket is bound here and handed to every process, so clients see one address
and the kernel gives each new connection to whichever process accepts it first. Each process
builds its own app (event loop, leases, worker connections) and shares the fleet's in-flight
view, routing, drains and voices through the Redis state backend, exactly as replicas on
separate hosts do: the config check refuses ``processes`` > 1 without it.

A process that dies after serving for a while is started again (its leases leave the shared
view as any dead replica's do); one that dies while starting stops them all, since its
siblings would fail the same way. SIGTERM or SIGINT is passed to every process, and each
finishes its streams within ``server.shutdown_grace_s``.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from types import FrameType

from gateway.config import GatewayConfig

log = logging.getLogger("gateway.serve")

# A process that served at least this long is restarted when it dies; sooner is a start-up failure.
SETTLED_S = 10.0
Target = Callable[[GatewayConfig, list[socket.socket]], int]


def listening_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """Bound and listening, as uvicorn binds its own (IPv6 when the host is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def _entry(target: Target, config: GatewayConfig, sock: socket.socket) -> None:
    raise SystemExit(target(config, [sock]))


def run(config: GatewayConfig, target: Target) -> int:
    """Run ``server.processes`` copies of ``target`` on one socket until stopped; the exit
    code of the first process that failed while starting, else 0."""
    count = config.server.processes
    sock = listening_socket(config.server.host, config.server.port)
    # spawn, not fork: each process starts clean (no inherited event loop, threads or clients).
    context = multiprocessing.get_context("spawn")
    processes: list[BaseProcess] = []
    started: list[float] = []
    stopping = False

    def start(index: int) -> BaseProcess:
        process = context.Process(target=_entry, args=(target, config, sock), name=f"gateway-{index + 1}")
        process.start()
        return process

    def stop(signum: int = signal.SIGTERM, frame: FrameType | None = None) -> None:
        nonlocal stopping
        stopping = True
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for index in range(count):
        processes.append(start(index))
        started.append(time.monotonic())
    log.warning("serving on %s:%d with %d processes", config.server.host, config.server.port, count)
    code = 0
    while any(process.is_alive() for process in processes):
        multiprocessing.connection.wait([p.sentinel for p in processes if p.is_alive()], timeout=1.0)
        for index, process in enumerate(processes):
            if process.is_alive() or stopping:
                continue
            if time.monotonic() - started[index] >= SETTLED_S:
                log.warning("gateway process %d exited with %s; starting it again", index + 1, process.exitcode)
                processes[index], started[index] = start(index), time.monotonic()
            else:
                log.error("gateway process %d exited with %s while starting; stopping", index + 1, process.exitcode)
                code = process.exitcode or 1
                stop()
    sock.close()
    return code
