"""vLLM's own router (``vllm-router``, installed by the ``bench`` extra) in front of workers.

The router an operator would put in front of two vllm-omni workers instead of the gateway:
it forwards ``POST /v1/audio/speech`` unchanged (streaming) and picks the worker by its own
policy, knowing nothing of SLA classes or profiles.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

INSTALL_HINT = "pip install -e '.[bench]'"
POLICIES = ("power_of_two", "round_robin")


def vllm_router_binary() -> str | None:
    """The console script beside this interpreter (a virtualenv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "vllm-router"
    return str(beside) if beside.exists() else shutil.which("vllm-router")


def vllm_router_command(port: int, workers: Sequence[str], policy: str, metrics_port: int) -> list[str]:
    """``vllm-router`` on 127.0.0.1:``port`` over ``workers`` (URLs) with ``policy``.

    Its defaults otherwise (retries, circuit breaker, queue), as an operator would run it;
    only the per-request log lines are turned down (they cost CPU the emulated workers
    share), and its metrics get a port of their own so two routers never collide.
    """
    if policy not in POLICIES:
        raise ValueError(f"vllm-router policy {policy!r}: one of {', '.join(POLICIES)}")
    binary = vllm_router_binary()
    if binary is None:
        raise RuntimeError(f"vllm-router is not installed ({INSTALL_HINT})")
    return [
        binary, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
        "--policy", policy, "--log-level", "warning", "--prometheus-port", str(metrics_port),
    ]  # fmt: skip
