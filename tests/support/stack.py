"""A real stack for integration tests: emulated workers + a gateway, all as processes."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.worker.profile import deep_merge
from tests.support.procs import GATEWAY_CLI, Proc, free_port, running, running_emulator

LL_PROFILE = "higgs_multimodal_qwen3_low_latency.yaml"
HT_PROFILE = "higgs_multimodal_qwen3_high_throughput.yaml"
ADMIN_TOKEN = "test-admin-token"


@dataclass
class Stack:
    gateway: Proc
    workers: dict[str, list[Proc]] = field(default_factory=dict)
    config_path: Path | None = None

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def gateway_config(
    tmp_path: Path, ll_urls: Sequence[str], ht_urls: Sequence[str], port: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port},
        "data_dir": str(tmp_path / "gateway-data"),
        "pools": {
            "low_latency": {"profile": LL_PROFILE, "workers": list(ll_urls)},
            "high_throughput": {"profile": HT_PROFILE, "workers": list(ht_urls)},
        },
        "health": {"interval_s": 0.5, "half_open_after_s": 1.0},
        "load_reports": {"interval_s": 0.25, "stale_after_s": 2.0},
        "auth": {"admin_token": ADMIN_TOKEN},
        "logging": {"level": "INFO"},
    }
    return deep_merge(config, extra or {})


def wait_routable(url: str, expected: dict[str, int], timeout: float = 60.0) -> None:
    """Until /admin/pools shows at least ``expected`` routable workers per pool."""
    deadline = time.monotonic() + timeout
    seen: Any = None
    while time.monotonic() < deadline:
        seen = httpx.get(f"{url}/admin/pools", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=5).json()
        if all(seen["pools"][pool]["routable_workers"] >= count for pool, count in expected.items()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"workers not routable in {timeout}s: {seen}")


@contextmanager
def running_gateway(
    tmp_path: Path,
    config: dict[str, Any],
    name: str = "gateway",
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
) -> Iterator[Proc]:
    """The gateway as a process; waits for /ready?require=every_pool (every pool
    routable) or, with ``wait_ready=False``, only for /health."""
    port = config["server"]["port"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{port}"
    ready = f"{url}/ready?require=every_pool" if wait_ready else f"{url}/health"
    with running([*GATEWAY_CLI, "serve", "--config", str(path)], ready, tmp_path / f"{name}.log", url, env=env, timeout=60) as proc:
        yield proc


@contextmanager
def running_stack(
    tmp_path: Path,
    ll_workers: int = 1,
    ht_workers: int = 1,
    time_scale: float = 0.05,
    extra: dict[str, Any] | None = None,
    worker_args: Sequence[str] = (),
) -> Iterator[Stack]:
    """Workers first, then a gateway pointed at them; /ready answers 200 before yield
    (every pool that has workers has a routable one)."""
    with ExitStack() as stack:
        workers: dict[str, list[Proc]] = {"low_latency": [], "high_throughput": []}
        for pool, profile, count in (("low_latency", LL_PROFILE, ll_workers), ("high_throughput", HT_PROFILE, ht_workers)):
            for index in range(count):
                proc = stack.enter_context(
                    running_emulator(tmp_path, profile, time_scale, worker_args, name=f"{pool}-{index}")
                )
                workers[pool].append(proc)
        port = free_port()
        config = gateway_config(
            tmp_path, [p.url for p in workers["low_latency"]], [p.url for p in workers["high_throughput"]], port, extra
        )
        both = ll_workers > 0 and ht_workers > 0
        gateway = stack.enter_context(running_gateway(tmp_path, config, wait_ready=both))
        if not both:
            wait_routable(gateway.url, {"low_latency": ll_workers, "high_throughput": ht_workers})
        yield Stack(gateway, workers, tmp_path / "gateway.yaml")
