"""Worker discovery: static URLs, DNS and Kubernetes, reported to a recording sink."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from lightkube import AsyncClient

from gateway.config import DiscoveryConfig, PoolConfig
from gateway.pools.discovery import StaticDiscovery, create_discovery
from gateway.pools.sources import endpoint_worker_id
from gateway.pools.discovery_dns import DnsDiscovery, getaddrinfo_resolver
from gateway.pools.discovery_k8s import KubernetesDiscovery
from gateway.types import PoolName
from tests.support.kube_api import FakeKubeApi

LL = PoolName.LOW_LATENCY
HT = PoolName.HIGH_THROUGHPUT
PROFILE = "higgs_multimodal_qwen3_low_latency.yaml"


class RecordingSink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.workers: dict[str, str] = {}

    def add_worker(self, pool: PoolName, worker_id: str, url: str, managed: bool = False) -> None:
        self.calls.append(("add", pool.value, worker_id, url))
        self.workers[worker_id] = url

    def remove_worker(self, worker_id: str) -> None:
        self.calls.append(("remove", worker_id))
        self.workers.pop(worker_id, None)

    def worker_restarting(self, worker_id: str) -> None:
        self.calls.append(("restarting", worker_id))

    def worker_failed(self, worker_id: str, reason: str) -> None:
        self.calls.append(("failed", worker_id))

    def take(self) -> list[tuple[str, ...]]:
        calls, self.calls = self.calls, []
        return calls


async def eventually(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def add(pool: PoolName, ip: str, port: int = 8091) -> tuple[str, ...]:
    host = f"[{ip}]" if ":" in ip else ip
    return ("add", pool.value, f"{pool.value}@{host}:{port}", f"http://{host}:{port}")


def remove(pool: PoolName, ip: str, port: int = 8091) -> tuple[str, ...]:
    return ("remove", endpoint_worker_id(pool, ip, port))


# ---- static ---------------------------------------------------------------------------


async def test_static_reports_each_configured_url_once() -> None:
    sink = RecordingSink()
    config = PoolConfig(profile=PROFILE, workers=["http://w1:8091/", "http://w2:9000"])
    discovery = create_discovery(LL, config, sink)
    assert isinstance(discovery, StaticDiscovery)
    await discovery.start()
    await discovery.stop()
    assert sink.take() == [
        ("add", "low_latency", "low_latency@w1:8091", "http://w1:8091"),
        ("add", "low_latency", "low_latency@w2:9000", "http://w2:9000"),
    ]


async def test_static_without_urls_reports_nothing() -> None:
    sink = RecordingSink()
    discovery = create_discovery(HT, PoolConfig(profile=PROFILE), sink)
    await discovery.start()
    assert sink.calls == []


# ---- dns ------------------------------------------------------------------------------


class ScriptedResolver:
    """Answers (or raises) from a script; the last entry repeats."""

    def __init__(self, *answers: list[str] | BaseException) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, int]] = []

    def set(self, *answers: list[str] | BaseException) -> None:
        self.answers = list(answers)

    async def __call__(self, name: str, port: int) -> list[str]:
        self.asked.append((name, port))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return list(answer)


def dns_discovery(resolver: ScriptedResolver, sink: RecordingSink, interval_s: float = 3600.0) -> DnsDiscovery:
    config = DiscoveryConfig(mode="dns", dns_name="workers-ll.higgs.svc", interval_s=interval_s)
    discovery = create_discovery(LL, PoolConfig(profile=PROFILE, discovery=config), sink, resolver=resolver)
    assert isinstance(discovery, DnsDiscovery)
    return discovery


async def test_dns_workers_join_and_leave() -> None:
    sink = RecordingSink()
    resolver = ScriptedResolver(["10.0.0.2", "10.0.0.1"])
    discovery = dns_discovery(resolver, sink)
    await discovery.start()
    try:
        assert resolver.asked == [("workers-ll.higgs.svc", 8091)]
        assert sink.take() == [add(LL, "10.0.0.1"), add(LL, "10.0.0.2")]

        resolver.set(["10.0.0.1", "10.0.0.2"])  # same set, another order: nothing happens
        await discovery.refresh()
        assert sink.take() == []

        resolver.set(["10.0.0.2", "10.0.0.3"])  # one left, one joined: remove first, then add
        await discovery.refresh()
        assert sink.take() == [remove(LL, "10.0.0.1"), add(LL, "10.0.0.3")]
        assert set(discovery.workers) == {"low_latency@10.0.0.2:8091", "low_latency@10.0.0.3:8091"}
    finally:
        await discovery.stop()


@pytest.mark.parametrize(
    "failure",
    [socket.gaierror(socket.EAI_NONAME, "Name or service not known"), OSError("network down"), []],
    ids=["nxdomain", "oserror", "empty"],
)
async def test_dns_failure_keeps_the_current_workers(failure: Any, caplog: pytest.LogCaptureFixture) -> None:
    sink = RecordingSink()
    resolver = ScriptedResolver(["10.0.0.1", "10.0.0.2"])
    discovery = dns_discovery(resolver, sink)
    await discovery.start()
    sink.take()
    resolver.set(failure)
    with caplog.at_level(logging.WARNING, logger="higgs_gateway.discovery.dns"):
        await discovery.refresh()
        await discovery.refresh()
    assert sink.take() == []
    assert len(discovery.workers) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "keeping its 2 known worker(s)" in warnings[0].getMessage()

    resolver.set(["10.0.0.2"])  # recovery reconciles against the kept set
    await discovery.refresh()
    assert sink.take() == [remove(LL, "10.0.0.1")]
    await discovery.stop()


async def test_dns_failure_at_start_then_workers_appear() -> None:
    sink = RecordingSink()
    resolver = ScriptedResolver(socket.gaierror(socket.EAI_AGAIN, "Temporary failure"), ["10.0.0.9"])
    discovery = dns_discovery(resolver, sink, interval_s=0.01)
    await discovery.start()  # must not raise: the pool simply starts empty
    await eventually(lambda: bool(sink.calls))
    await discovery.stop()
    assert sink.calls == [add(LL, "10.0.0.9")]


async def test_dns_hanging_resolver_counts_as_failure() -> None:
    sink = RecordingSink()
    calls = 0

    async def resolver(name: str, port: int) -> list[str]:
        nonlocal calls
        calls += 1
        if calls > 1:
            await asyncio.sleep(3600)
        return ["10.0.0.1"]

    config = DiscoveryConfig(mode="dns", dns_name="w", interval_s=0.02)
    discovery = DnsDiscovery(LL, config, sink, resolver=resolver)
    await discovery.start()
    await discovery.refresh()  # times out after interval_s instead of hanging
    await discovery.stop()
    assert sink.calls == [add(LL, "10.0.0.1")]


async def test_dns_background_loop_follows_changes_and_stops() -> None:
    sink = RecordingSink()
    resolver = ScriptedResolver(["10.0.0.1"])
    discovery = dns_discovery(resolver, sink, interval_s=0.01)
    await discovery.start()
    resolver.set(["10.0.0.1", "fd00::5"])
    await eventually(lambda: len(sink.calls) == 2)
    assert sink.calls[1] == add(LL, "fd00::5")
    await discovery.stop()
    asked = len(resolver.asked)
    await asyncio.sleep(0.05)
    assert len(resolver.asked) == asked  # stopped: no more resolutions


async def test_a_failing_sink_call_is_retried_next_time() -> None:
    class FlakySink(RecordingSink):
        fail_next = True

        def add_worker(self, pool: PoolName, worker_id: str, url: str, managed: bool = False) -> None:
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("fleet not ready")
            super().add_worker(pool, worker_id, url, managed)

    sink = FlakySink()
    discovery = dns_discovery(ScriptedResolver(["10.0.0.1"]), sink)
    await discovery.start()  # the failure is logged, not raised
    assert sink.calls == [] and discovery.workers == {}
    await discovery.refresh()
    await discovery.stop()
    assert sink.calls == [add(LL, "10.0.0.1")]


async def test_default_resolver_returns_addresses() -> None:
    assert await getaddrinfo_resolver("127.0.0.1", 8091) == ["127.0.0.1"]


# ---- kubernetes: through the real client, against a fake API server on 127.0.0.1 --------

SLICES = "endpointslices"
SERVICE = "higgs-worker-low-latency"


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApi]:
    async with FakeKubeApi("higgs") as api:
        yield api


@pytest.fixture
async def kube_client(kube: FakeKubeApi) -> AsyncIterator[AsyncClient]:
    client = kube.client()
    yield client
    await client.close()


def pod_add(name: str, ip: str, port: int = 8091) -> tuple[str, ...]:
    """A Kubernetes worker is identified by its pod's name, wherever it runs."""
    return ("add", LL.value, f"{LL.value}@{name}", f"http://{ip}:{port}")


def pod_remove(name: str) -> tuple[str, ...]:
    return ("remove", f"{LL.value}@{name}")


def slice_add(ip: str, port: int = 8091) -> tuple[str, ...]:
    return pod_add(f"pod-{ip}", ip, port)  # endpoint_slice() names each endpoint's pod pod-<ip>


def slice_remove(ip: str) -> tuple[str, ...]:
    return pod_remove(f"pod-{ip}")


def endpoint_slice(name: str, endpoints: list[tuple[str, bool | None]], service: str = SERVICE) -> dict[str, Any]:
    def endpoint(ip: str, ready: bool | None) -> dict[str, Any]:
        conditions = {} if ready is None else {"ready": ready, "serving": ready, "terminating": not ready}
        return {"addresses": [ip], "conditions": conditions, "targetRef": {"kind": "Pod", "name": f"pod-{ip}"}}

    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [endpoint(ip, ready) for ip, ready in endpoints],
        "ports": [{"name": "http", "port": 8091, "protocol": "TCP"}],
    }


def pod(name: str, ip: str | None, ready: bool, deleting: bool = False, pool: str = "low-latency") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/component": "worker", "pool": pool}}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": metadata, "spec": {"containers": [{"name": "worker", "image": "worker"}]}, "status": status}


def k8s_discovery(client: AsyncClient, sink: RecordingSink, **config: Any) -> KubernetesDiscovery:
    settings = {"service": SERVICE} if "label_selector" not in config else {}
    discovery_config = DiscoveryConfig(mode="kubernetes", namespace="higgs", interval_s=0.01, **settings, **config)
    discovery = create_discovery(LL, PoolConfig(profile=PROFILE, discovery=discovery_config), sink, kube_api=client)
    assert isinstance(discovery, KubernetesDiscovery)
    return discovery


async def watching(kube: FakeKubeApi, count: int = 1) -> None:
    """Until discovery's ``count``-th watch is open on the server."""
    await eventually(lambda: len(kube.watches()) >= count and kube.open_watches() == 1)


async def test_k8s_initial_list_adds_only_ready_endpoints(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", False), ("10.1.0.3", None)]))
    kube.put(SLICES, endpoint_slice("s2", [("10.1.0.1", True), ("10.1.0.4", True)]))  # same pod in two slices
    kube.put(SLICES, endpoint_slice("other", [("10.9.0.1", True)], service="another-service"))
    discovery = k8s_discovery(kube_client, sink)
    await discovery.start()
    await discovery.stop()
    # ready: absent "ready" means ready (API contract); not-ready is left out
    assert sink.calls == [slice_add("10.1.0.1"), slice_add("10.1.0.3"), slice_add("10.1.0.4")]
    assert kube.calls[0].namespace == "higgs" and not kube.calls[0].watch
    assert kube.calls[0].params["labelSelector"] == f"kubernetes.io/service-name={SERVICE}"


async def test_k8s_watch_events_join_and_leave(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    listed = kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True)]))
    discovery = k8s_discovery(kube_client, sink)
    await discovery.start()
    assert sink.take() == [slice_add("10.1.0.1")]
    await watching(kube)
    assert kube.last_watched_version() == listed

    # A new pod becomes ready.
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", True)]))
    # A second slice appears with a pod still starting (not ready yet): nothing to add.
    kube.put(SLICES, endpoint_slice("s2", [("10.1.0.3", False)]))
    await eventually(lambda: len(sink.calls) >= 1)
    # The first pod is terminating (scale-down): it leaves before it stops; the starting pod is ready.
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", False), ("10.1.0.2", True)]))
    kube.put(SLICES, endpoint_slice("s2", [("10.1.0.3", True)]))
    kube.delete(SLICES, "s2")
    await eventually(lambda: len(sink.calls) >= 4)
    await discovery.stop()
    assert sink.calls == [slice_add("10.1.0.2"), slice_remove("10.1.0.1"), slice_add("10.1.0.3"), slice_remove("10.1.0.3")]
    assert set(discovery.workers) == {"low_latency@pod-10.1.0.2"}
    assert kube.lists() == 1, "nothing here needed a re-list"


async def test_k8s_a_watch_the_server_ends_resumes_without_missing_a_change(
    kube: FakeKubeApi, kube_client: AsyncClient
) -> None:
    sink = RecordingSink()
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True)]))
    discovery = k8s_discovery(kube_client, sink)
    await discovery.start()
    sink.take()
    await watching(kube)
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", True)]))
    await eventually(lambda: bool(sink.calls))
    resumed_from = kube.version

    kube.end_watches()  # the server's timeout
    changed = kube.put(SLICES, endpoint_slice("s1", [("10.1.0.2", True)]))  # maybe before the watch is back
    await eventually(lambda: len(sink.calls) >= 2)
    await discovery.stop()
    assert sink.calls == [slice_add("10.1.0.2"), slice_remove("10.1.0.1")]
    # Resumed from the last version it saw (the change replayed from there), not re-listed.
    assert kube.watches()[-1].params["resourceVersion"] == str(resumed_from) and changed > resumed_from
    assert kube.lists() == 1


async def test_k8s_410_gone_relists_and_reconciles(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", True)]))
    discovery = k8s_discovery(kube_client, sink)
    await discovery.start()
    sink.take()
    await watching(kube)

    # Changes the watch never saw, then its history is compacted: 410 Gone. The re-list
    # shows 10.1.0.1 gone and 10.1.0.5 new.
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.2", True), ("10.1.0.5", True)]), announce=False)
    kube.expire_watches()
    await eventually(lambda: kube.lists() == 2 and len(kube.watches()) == 2)
    assert sink.take() == [slice_remove("10.1.0.1"), slice_add("10.1.0.5")]
    assert kube.last_watched_version() == kube.version

    # A watch that starts from a version already compacted away: the same.
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.5", True)]), announce=False)
    kube.expire_next_watch()
    kube.end_watches()
    await eventually(lambda: kube.lists() == 3 and len(kube.watches()) == 4)
    await discovery.stop()
    assert sink.calls == [slice_remove("10.1.0.2")]


async def test_k8s_each_watch_ends_at_its_deadline_and_the_relist_repairs_a_missed_change(
    kube: FakeKubeApi, kube_client: AsyncClient
) -> None:
    sink = RecordingSink()
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True)]))
    discovery = k8s_discovery(kube_client, sink, watch_timeout_s=0.2)
    await discovery.start()
    sink.take()
    await watching(kube)
    assert float(kube.watches()[0].params["timeoutSeconds"]) > 0.2, "the server's timeout is only the backstop"
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.6", True)]), announce=False)
    await eventually(lambda: bool(sink.calls), timeout=5)
    await discovery.stop()
    assert sink.calls == [slice_add("10.1.0.6")]
    assert kube.lists() >= 2


async def test_k8s_api_failures_keep_the_pool(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True)]))
    discovery = k8s_discovery(kube_client, sink)
    await discovery.start()
    sink.take()
    await watching(kube)

    # The watch is cut and the API server stays away for a while: nobody is removed.
    kube.outage(True)
    await eventually(lambda: kube.failures >= 4)
    assert sink.calls == [] and set(discovery.workers) == {"low_latency@pod-10.1.0.1"}
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", True)]))
    watches_before = len(kube.watches())
    kube.outage(False)
    await eventually(lambda: bool(sink.calls))
    await watching(kube, watches_before + 1)
    await discovery.stop()
    assert sink.calls == [slice_add("10.1.0.2")]


async def test_k8s_list_failure_at_start_retries(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.7", True)]))
    kube.fail_lists(403)  # RBAC not applied yet
    discovery = k8s_discovery(kube_client, sink)
    await discovery.start()  # must not raise
    assert sink.calls == []
    await eventually(lambda: bool(sink.calls))
    await discovery.stop()
    assert sink.calls == [slice_add("10.1.0.7")]


async def test_k8s_pods_by_label_selector(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    kube.put("pods", pod("w-a", "10.2.0.1", ready=True))
    kube.put("pods", pod("w-b", "10.2.0.2", ready=False))
    kube.put("pods", pod("w-c", None, ready=False))
    kube.put("pods", pod("w-x", "10.2.0.9", ready=True, pool="high-throughput"))
    selector = "app.kubernetes.io/component=worker,pool=low-latency"
    discovery = k8s_discovery(kube_client, sink, label_selector=selector, port=9000)
    await discovery.start()
    await watching(kube)
    assert sink.take() == [pod_add("w-a", "10.2.0.1", 9000)]
    assert {call.params["labelSelector"] for call in kube.calls} == {selector}, "the selector is sent verbatim"

    kube.put("pods", pod("w-b", "10.2.0.2", ready=True))
    kube.put("pods", pod("w-a", "10.2.0.1", ready=True, deleting=True))
    await eventually(lambda: len(sink.calls) >= 2)
    await discovery.stop()
    assert sink.calls == [pod_add("w-b", "10.2.0.2", 9000), pod_remove("w-a")]


def slice_with_ports(ports: list[dict[str, Any]], *endpoints: tuple[str, str]) -> dict[str, Any]:
    """An EndpointSlice with the given ports and (pod name, ip) endpoints, all ready."""
    item = endpoint_slice("s1", [])
    item["ports"] = ports
    item["endpoints"] = [
        {"addresses": [ip], "conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": name}}
        for name, ip in endpoints
    ]
    return item


@pytest.mark.parametrize(
    ("ports", "config", "expected"),
    [
        ([{"name": "http", "port": 9100, "protocol": "TCP"}], {}, 9100),  # the slice's only port, not `port`
        ([{"name": "metrics", "port": 9400}, {"name": "http", "port": 9100}], {"port_name": "http"}, 9100),
        ([{"name": "a", "port": 7000}, {"name": "b", "port": 8091}], {}, 8091),  # several: the configured one
        ([{"name": "a", "port": 7000}, {"name": "b", "port": 7001}], {}, 7000),  # several, none configured: first
        ([{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "http", "port": 9100}], {}, 9100),  # TCP only
        ([], {"port": 9200}, 9200),  # a slice listing no port: the configured one
    ],
)
async def test_k8s_uses_each_endpointslices_own_port(
    kube: FakeKubeApi, kube_client: AsyncClient, ports: list[dict[str, Any]], config: dict[str, Any], expected: int
) -> None:
    sink = RecordingSink()
    kube.put(SLICES, slice_with_ports(ports, ("worker-0", "10.3.0.1")))
    discovery = k8s_discovery(kube_client, sink, **config)
    await discovery.start()
    await discovery.stop()
    assert sink.calls == [pod_add("worker-0", "10.3.0.1", expected)]


async def test_k8s_a_slice_without_the_named_port_adds_nobody(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    kube.put(SLICES, slice_with_ports([{"name": "metrics", "port": 9400}], ("worker-0", "10.3.0.1")))
    discovery = k8s_discovery(kube_client, sink, port_name="http")
    await discovery.start()
    await discovery.stop()
    assert sink.calls == []


async def test_k8s_pods_use_their_named_container_port(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    item = pod("w-a", "10.2.0.1", ready=True)
    item["spec"] = {"containers": [{"name": "worker", "ports": [{"name": "http", "containerPort": 8095}]}]}
    kube.put("pods", item)
    discovery = k8s_discovery(kube_client, sink, label_selector="pool=low-latency", port_name="http")
    await discovery.start()
    await discovery.stop()
    assert sink.calls == [pod_add("w-a", "10.2.0.1", 8095)]


async def test_k8s_a_pod_at_a_new_address_keeps_its_worker_id(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    sink = RecordingSink()
    kube.put(SLICES, slice_with_ports([{"name": "http", "port": 8091}], ("worker-0", "10.3.0.1")))
    discovery = k8s_discovery(kube_client, sink)
    await discovery.start()
    assert sink.take() == [pod_add("worker-0", "10.3.0.1")]
    await watching(kube)
    # Rescheduled: the same pod name at another IP is the same worker at a new URL, not a leaver and a joiner.
    kube.put(SLICES, slice_with_ports([{"name": "http", "port": 8091}], ("worker-0", "10.3.0.9")))
    await eventually(lambda: bool(sink.calls))
    await discovery.stop()
    assert sink.calls == [pod_add("worker-0", "10.3.0.9")]


async def test_k8s_api_outage_is_logged_once_and_its_end_once(
    kube: FakeKubeApi, kube_client: AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    sink = RecordingSink()
    kube.put(SLICES, endpoint_slice("s1", [("10.1.0.1", True)]))
    discovery = k8s_discovery(kube_client, sink)
    await discovery.start()
    await watching(kube)
    with caplog.at_level(logging.DEBUG, logger="higgs_gateway.discovery.kubernetes"):
        kube.outage(True)  # the watch is cut, then every list fails
        await eventually(lambda: kube.failures >= 6)
        kube.outage(False)
        await watching(kube, len(kube.watches()) + 1)
    await discovery.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "keeping 1 worker(s)" in warnings[0], warnings
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "answers again" in r.getMessage()]
    assert len(infos) == 1, infos
    assert sink.calls == [slice_add("10.1.0.1")]


async def test_k8s_stop_closes_a_watch_in_progress(kube: FakeKubeApi, kube_client: AsyncClient) -> None:
    discovery = k8s_discovery(kube_client, RecordingSink())
    await discovery.start()
    await watching(kube)
    await discovery.stop()
    await eventually(lambda: kube.open_watches() == 0)


def test_discovery_config_needs_its_mode_fields() -> None:
    with pytest.raises(ValueError, match="dns_name"):
        DiscoveryConfig(mode="dns")
    with pytest.raises(ValueError, match="exactly one"):
        DiscoveryConfig(mode="kubernetes")
    with pytest.raises(ValueError, match="exactly one"):
        DiscoveryConfig(mode="kubernetes", service="s", label_selector="a=b")
