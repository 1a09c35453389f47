"""A worker that keeps its identity across an address change keeps its metric series.

Kubernetes discovery names a worker by its pod: when the pod is rescheduled to another
address (here: another port, as the EndpointSlice's own port says), the gateway treats the
process as new (not routable until the voices are replayed to it, counted as a restart)
but under the same worker id, so ``higgs_gateway_worker_*{worker=...}`` stays one series.

Two real emulated workers (processes on 127.0.0.1); the gateway runs in this process, its
discovery reads a fake API server over HTTP on 127.0.0.1 through its real client.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from gateway.app import create_app
from gateway.config import GatewayConfig, PoolConfig
from gateway.pools.discovery import Discovery, create_discovery
from gateway.pools.fleet import Fleet
from gateway.types import PoolName
from tests.integration.conftest import metric
from tests.support.audio import reference_wav
from tests.support.kube_api import FakeKubeApi
from tests.support.procs import running_emulator
from tests.support.stack import LL_PROFILE

SERVICE = "higgs-worker-low-latency"
POD = "higgs-worker-low-latency-7d9f-x2k4q"
WORKER_ID = f"low_latency@{POD}"


def endpoint_slice(port: int) -> dict[str, Any]:
    """The Service's one EndpointSlice, its single endpoint the pod, serving on ``port``."""
    return {
        "metadata": {"name": "higgs-worker-low-latency-abcde", "labels": {"kubernetes.io/service-name": SERVICE}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": POD}}],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }


async def eventually(predicate: Any, timeout: float = 30.0, what: str = "") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out: {what}")
        await asyncio.sleep(0.05)


def voices_on(url: str) -> set[str]:
    return {v["name"] for v in httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["uploaded_voices"]}


async def test_a_pod_back_at_another_address_keeps_its_series_and_gets_its_voices(tmp_path: Path) -> None:
    async with FakeKubeApi("higgs") as api:
        await pod_moves(api, tmp_path)


async def pod_moves(api: FakeKubeApi, tmp_path: Path) -> None:
    with running_emulator(tmp_path, LL_PROFILE, 0.05, name="before") as before, running_emulator(
        tmp_path, LL_PROFILE, 0.05, name="after"
    ) as after:
        port_before, port_after = (int(p.url.rsplit(":", 1)[1]) for p in (before, after))
        api.put("endpointslices", endpoint_slice(port_before))

        def factory(pool: PoolName, config: PoolConfig, sink: Fleet) -> Discovery:
            return create_discovery(pool, config, sink, kube_api=api.client() if pool is PoolName.LOW_LATENCY else None)

        # The slice's own port is used: the configured one (8091) is wrong on purpose.
        discovery = {"mode": "kubernetes", "service": SERVICE, "namespace": "higgs", "port": 8091}
        config = GatewayConfig(
            data_dir=tmp_path / "gateway-data",
            pools={"low_latency": {"profile": LL_PROFILE, "discovery": discovery, "warmup": {"enabled": False}}},
            health={"interval_s": 0.25},
        )
        gateway = create_app(config, discovery_factory=factory)
        await gateway.start()
        try:
            worker = lambda: gateway.fleet.members.get(WORKER_ID)  # noqa: E731
            await eventually(lambda: worker() is not None and worker().routable, what="the pod routable")
            assert worker().url == before.url
            await gateway.voices.add("pod-voice", reference_wav(), consent="yes")
            assert "pod-voice" in voices_on(before.url)
            series = metric(gateway.recorder.metrics.render(None)[0].decode(), "higgs_gateway_worker_up", worker=WORKER_ID)
            assert series == 1

            before.stop()  # the pod is rescheduled: gone here, back there
            api.put("endpointslices", endpoint_slice(port_after))
            await eventually(lambda: worker().url == after.url, what="the same worker id at its new address")
            await eventually(lambda: worker().routable, what="routable again at the new address")
            assert "pod-voice" in voices_on(after.url), "replayed before it became routable"

            text = gateway.recorder.metrics.render(None)[0].decode()
            assert metric(text, "higgs_gateway_worker_up", worker=WORKER_ID) == 1
            ll_series = {line.split("worker=", 1)[1].split('"')[1] for line in text.splitlines()
                         if line.startswith("higgs_gateway_worker_up{") and 'pool="low_latency"' in line}  # fmt: skip
            assert ll_series == {WORKER_ID}, "one series for the pod, none per address"
            assert metric(text, "higgs_gateway_worker_restarts_total", pool="low_latency", reason="address_changed") == 1
        finally:
            await gateway.stop()
