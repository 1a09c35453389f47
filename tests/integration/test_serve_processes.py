"""``server.processes: 2``: two gateway processes on one port, each a replica on one real
Redis. Both take connections, a stream held through either is counted by both, and
SIGTERM to the parent stops them all."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from tests.integration.conftest import ADMIN, LONG_TEXT, speech_body, wait_until, worker_id
from tests.support.procs import free_port, running_emulator
from tests.support.redis_server import running_redis
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway

TIME_SCALE = 3.0  # a `latency` stream lasts tens of seconds: long enough to be looked at


def _answer(url: str, wid: str) -> tuple[str, int, int]:
    """(replica id, its own leases on the worker, the other replicas') from a fresh connection."""
    with httpx.Client(timeout=10) as client:  # a new connection: either process may take it
        body: dict[str, Any] = client.get(f"{url}/admin/pools", headers=ADMIN).json()
    worker = next(w for w in body["pools"]["low_latency"]["workers"] if w["id"] == wid)
    return body["fleet_view"]["replica"], worker["inflight"], worker["other_replicas_inflight"]


def _children(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children]


async def test_two_processes_serve_one_port_and_count_each_others_streams(tmp_path: Path) -> None:
    with (
        running_redis(tmp_path / "redis") as redis,
        running_emulator(tmp_path, LL_PROFILE, TIME_SCALE, name="ll") as ll,
        running_emulator(tmp_path, HT_PROFILE, TIME_SCALE, name="ht") as ht,
    ):
        extra = {"state": {"backend": "redis", "redis_url": redis.url, "key_prefix": "processes-it:"}}
        config = gateway_config(tmp_path, [ll.url], [ht.url], free_port(), extra)
        config["server"].update(processes=2, shutdown_grace_s=2)
        with running_gateway(tmp_path, config) as gateway:
            wid = worker_id(gateway.url, ll.url)
            seen: dict[str, tuple[int, int]] = {}

            def both_answered_idle() -> bool:
                replica, own, others = _answer(gateway.url, wid)
                if own + others == 0:
                    seen[replica] = (own, others)
                return len(seen) == 2

            wait_until(both_answered_idle, 60, "both processes answer on the one port")
            seen.clear()

            def both_count_the_stream() -> bool:
                replica, own, others = _answer(gateway.url, wid)
                if own + others == 1:
                    seen[replica] = (own, others)
                return len(seen) == 2

            async with httpx.AsyncClient(timeout=60) as client, client.stream(
                "POST", f"{gateway.url}/v1/audio/speech", json=speech_body(LONG_TEXT, response_format="pcm"),
                headers={"x-sla-class": "latency"},
            ) as response:  # fmt: skip
                assert response.status_code == 200
                assert response.headers["x-gateway-pool"] == "low_latency"
                chunks = response.aiter_bytes()  # kept referenced: a collected iterator closes the stream
                await anext(chunks)
                await asyncio.to_thread(wait_until, both_count_the_stream, 20, "both processes count the stream")
            # One process holds the lease; the other sees it only through the shared view.
            assert sorted(seen.values()) == [(0, 1), (1, 0)]
            children = [child for child in _children(gateway.popen.pid) if _is_gateway(child)]
            assert len(children) == 2
        assert gateway.popen.returncode == 0  # SIGTERM: every process finished its streams, none was killed
        assert not [child for child in children if Path(f"/proc/{child}").exists()]


def _is_gateway(pid: int) -> bool:
    return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
