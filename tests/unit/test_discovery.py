"""Worker discovery: static URLs, DNS and Kubernetes, reported to a recording sink."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.config import DiscoveryConfig, PoolConfig
from gateway.pools.discovery import StaticDiscovery, create_discovery
from gateway.pools.sources import endpoint_worker_id
from gateway.pools.discovery_dns import DnsDiscovery, getaddrinfo_resolver
from gateway.pools.discovery_k8s import KubernetesDiscovery, OfficialResourceApi, WatchExpired
from gateway.types import PoolName

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


# ---- kubernetes -----------------------------------------------------------------------

END = object()


class FakeApi:
    """A scripted collection: list answers in order (last repeats); watches fed by the test."""

    def __init__(self, *listings: dict[str, Any] | BaseException) -> None:
        self.listings = list(listings)
        self.list_calls = 0
        self.watch_versions: list[str] = []
        self.queue: asyncio.Queue[Any] | None = None

    def set(self, *listings: dict[str, Any] | BaseException) -> None:
        self.listings = list(listings)

    async def list(self) -> dict[str, Any]:
        self.list_calls += 1
        listing = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        if isinstance(listing, BaseException):
            raise listing
        return json.loads(json.dumps(listing))

    async def watch(self, resource_version: str, timeout_s: float) -> AsyncIterator[dict[str, Any]]:
        self.watch_versions.append(resource_version)
        queue = self.queue = asyncio.Queue()
        while (item := await queue.get()) is not END:
            if isinstance(item, BaseException):
                raise item
            yield item

    def send(self, item: Any) -> None:
        assert self.queue is not None
        self.queue.put_nowait(item)


def pod_add(name: str, ip: str, port: int = 8091) -> tuple[str, ...]:
    """A Kubernetes worker is identified by its pod's name, wherever it runs."""
    return ("add", LL.value, f"{LL.value}@{name}", f"http://{ip}:{port}")


def pod_remove(name: str) -> tuple[str, ...]:
    return ("remove", f"{LL.value}@{name}")


def slice_add(ip: str, port: int = 8091) -> tuple[str, ...]:
    return pod_add(f"pod-{ip}", ip, port)  # endpoint_slice() names each endpoint's pod pod-<ip>


def slice_remove(ip: str) -> tuple[str, ...]:
    return pod_remove(f"pod-{ip}")


def endpoint_slice(name: str, endpoints: list[tuple[str, bool | None]], rv: str = "5") -> dict[str, Any]:
    def endpoint(ip: str, ready: bool | None) -> dict[str, Any]:
        conditions = {} if ready is None else {"ready": ready, "serving": ready, "terminating": not ready}
        return {"addresses": [ip], "conditions": conditions, "targetRef": {"kind": "Pod", "name": f"pod-{ip}"}}

    return {
        "metadata": {"name": name, "namespace": "higgs", "resourceVersion": rv,
                     "labels": {"kubernetes.io/service-name": "higgs-worker-low-latency"}},
        "addressType": "IPv4",
        "endpoints": [endpoint(ip, ready) for ip, ready in endpoints],
        "ports": [{"name": "http", "port": 8091, "protocol": "TCP"}],
    }  # fmt: skip


def pod(name: str, ip: str | None, ready: bool, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "higgs", "resourceVersion": "7"}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": metadata, "status": status}


def listing(*items: dict[str, Any], rv: str = "100") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv}, "items": list(items)}


def k8s_discovery(api: FakeApi, sink: RecordingSink, **config: Any) -> KubernetesDiscovery:
    settings = {"service": "higgs-worker-low-latency"} if "label_selector" not in config else {}
    discovery_config = DiscoveryConfig(mode="kubernetes", namespace="higgs", interval_s=0.01, **settings, **config)
    discovery = create_discovery(LL, PoolConfig(profile=PROFILE, discovery=discovery_config), sink, kube_api=api)
    assert isinstance(discovery, KubernetesDiscovery)
    return discovery


async def test_k8s_initial_list_adds_only_ready_endpoints() -> None:
    sink = RecordingSink()
    api = FakeApi(listing(
        endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", False), ("10.1.0.3", None)]),
        endpoint_slice("s2", [("10.1.0.1", True), ("10.1.0.4", True)]),  # same pod in two slices
    ))  # fmt: skip
    discovery = k8s_discovery(api, sink)
    await discovery.start()
    await discovery.stop()
    # ready: absent "ready" means ready (API contract); not-ready is left out
    assert sink.calls == [slice_add("10.1.0.1"), slice_add("10.1.0.3"), slice_add("10.1.0.4")]


async def test_k8s_watch_events_join_and_leave() -> None:
    sink = RecordingSink()
    api = FakeApi(listing(endpoint_slice("s1", [("10.1.0.1", True)]), rv="100"))
    discovery = k8s_discovery(api, sink)
    await discovery.start()
    assert sink.take() == [slice_add("10.1.0.1")]
    await eventually(lambda: api.watch_versions == ["100"])

    # A new pod becomes ready.
    api.send({"type": "MODIFIED", "object": endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", True)], rv="101")})
    # A second slice appears with a pod still starting (not ready yet): nothing to add.
    api.send({"type": "ADDED", "object": endpoint_slice("s2", [("10.1.0.3", False)], rv="102")})
    await eventually(lambda: len(sink.calls) >= 1)
    await asyncio.sleep(0.01)
    assert sink.take() == [slice_add("10.1.0.2")]

    # The first pod is terminating (scale-down): it leaves before it stops; the starting pod is ready.
    api.send({"type": "MODIFIED", "object": endpoint_slice("s1", [("10.1.0.1", False), ("10.1.0.2", True)], rv="103")})
    api.send({"type": "MODIFIED", "object": endpoint_slice("s2", [("10.1.0.3", True)], rv="104")})
    api.send({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "105"}}})
    api.send({"type": "DELETED", "object": endpoint_slice("s2", [("10.1.0.3", True)], rv="106")})
    await eventually(lambda: len(sink.calls) >= 3)
    await discovery.stop()
    assert sink.calls == [slice_remove("10.1.0.1"), slice_add("10.1.0.3"), slice_remove("10.1.0.3")]
    assert set(discovery.workers) == {"low_latency@pod-10.1.0.2"}


async def test_k8s_watch_expiry_relists_and_reconciles() -> None:
    sink = RecordingSink()
    api = FakeApi(listing(endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", True)]), rv="100"))
    discovery = k8s_discovery(api, sink)
    await discovery.start()
    sink.take()
    await eventually(lambda: api.watch_versions == ["100"])

    # Events were missed while the watch was down: the re-list shows 10.1.0.1 gone, 10.1.0.5 new.
    api.set(listing(endpoint_slice("s1", [("10.1.0.2", True), ("10.1.0.5", True)]), rv="200"))
    api.send(END)  # the server ended the watch (timeout_seconds)
    await eventually(lambda: api.watch_versions == ["100", "200"])
    assert sink.take() == [slice_remove("10.1.0.1"), slice_add("10.1.0.5")]

    # 410 Gone as an ERROR event: list again, watch from the new version.
    api.set(listing(endpoint_slice("s1", [("10.1.0.5", True)]), rv="300"))
    api.send({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}})
    await eventually(lambda: api.watch_versions == ["100", "200", "300"])
    assert sink.take() == [slice_remove("10.1.0.2")]

    # 410 raised by the client: same.
    api.set(listing(endpoint_slice("s1", [("10.1.0.5", True)]), rv="400"))
    api.send(WatchExpired("too old"))
    await eventually(lambda: api.watch_versions[-1:] == ["400"])
    await discovery.stop()
    assert sink.calls == [] and api.list_calls == 4


async def test_k8s_api_failures_keep_the_pool() -> None:
    sink = RecordingSink()
    api = FakeApi(listing(endpoint_slice("s1", [("10.1.0.1", True)]), rv="100"))
    discovery = k8s_discovery(api, sink)
    await discovery.start()
    sink.take()
    await eventually(lambda: len(api.watch_versions) == 1)

    # The watch breaks and the API server stays away for two lists: nobody is removed.
    api.set(ConnectionError("api server down"), ConnectionError("still down"), listing(
        endpoint_slice("s1", [("10.1.0.1", True), ("10.1.0.2", True)]), rv="150"))  # fmt: skip
    api.send(ConnectionResetError("watch cut"))
    await eventually(lambda: api.watch_versions[-1:] == ["150"])
    await discovery.stop()
    assert api.list_calls == 4
    assert sink.calls == [slice_add("10.1.0.2")]


async def test_k8s_list_failure_at_start_retries() -> None:
    sink = RecordingSink()
    api = FakeApi(
        PermissionError("403 endpointslices is forbidden"), listing(endpoint_slice("s1", [("10.1.0.7", True)]))
    )
    discovery = k8s_discovery(api, sink)
    await discovery.start()  # must not raise
    assert sink.calls == []
    await eventually(lambda: bool(sink.calls))
    await discovery.stop()
    assert sink.calls == [slice_add("10.1.0.7")]


async def test_k8s_pods_by_label_selector() -> None:
    sink = RecordingSink()
    api = FakeApi(listing(
        pod("w-a", "10.2.0.1", ready=True),
        pod("w-b", "10.2.0.2", ready=False),
        pod("w-c", None, ready=False),
    ))  # fmt: skip
    discovery = k8s_discovery(
        api, sink, label_selector="app.kubernetes.io/component=worker,pool=low-latency", port=9000
    )
    await discovery.start()
    await eventually(lambda: len(api.watch_versions) == 1)
    assert sink.take() == [pod_add("w-a", "10.2.0.1", 9000)]

    api.send({"type": "MODIFIED", "object": pod("w-b", "10.2.0.2", ready=True)})
    api.send({"type": "MODIFIED", "object": pod("w-a", "10.2.0.1", ready=True, deleting=True)})
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
        ([], {"port": 9200}, 9200),  # a slice listing no port: the configured one
    ],
)
async def test_k8s_uses_each_endpointslices_own_port(ports: list[dict[str, Any]], config: dict[str, Any], expected: int) -> None:
    sink = RecordingSink()
    api = FakeApi(listing(slice_with_ports(ports, ("worker-0", "10.3.0.1"))))
    discovery = k8s_discovery(api, sink, **config)
    await discovery.start()
    await discovery.stop()
    assert sink.calls == [pod_add("worker-0", "10.3.0.1", expected)]


async def test_k8s_a_slice_without_the_named_port_adds_nobody() -> None:
    sink = RecordingSink()
    api = FakeApi(listing(slice_with_ports([{"name": "metrics", "port": 9400}], ("worker-0", "10.3.0.1"))))
    discovery = k8s_discovery(api, sink, port_name="http")
    await discovery.start()
    await discovery.stop()
    assert sink.calls == []


async def test_k8s_pods_use_their_named_container_port() -> None:
    sink = RecordingSink()
    item = pod("w-a", "10.2.0.1", ready=True)
    item["spec"] = {"containers": [{"name": "worker", "ports": [{"name": "http", "containerPort": 8095}]}]}
    api = FakeApi(listing(item))
    discovery = k8s_discovery(api, sink, label_selector="pool=low-latency", port_name="http")
    await discovery.start()
    await discovery.stop()
    assert sink.calls == [pod_add("w-a", "10.2.0.1", 8095)]


async def test_k8s_a_pod_at_a_new_address_keeps_its_worker_id() -> None:
    sink = RecordingSink()
    api = FakeApi(listing(slice_with_ports([{"name": "http", "port": 8091}], ("worker-0", "10.3.0.1")), rv="100"))
    discovery = k8s_discovery(api, sink)
    await discovery.start()
    assert sink.take() == [pod_add("worker-0", "10.3.0.1")]
    await eventually(lambda: api.watch_versions == ["100"])
    # Rescheduled: the same pod name at another IP is the same worker at a new URL, not a leaver and a joiner.
    moved = slice_with_ports([{"name": "http", "port": 8091}], ("worker-0", "10.3.0.9"))
    moved["metadata"]["resourceVersion"] = "101"
    api.send({"type": "MODIFIED", "object": moved})
    await eventually(lambda: bool(sink.calls))
    await discovery.stop()
    assert sink.calls == [pod_add("worker-0", "10.3.0.9")]


async def test_k8s_api_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    sink = RecordingSink()
    api = FakeApi(listing(endpoint_slice("s1", [("10.1.0.1", True)]), rv="100"))
    discovery = k8s_discovery(api, sink)
    await discovery.start()
    await eventually(lambda: len(api.watch_versions) == 1)
    down = [ConnectionError("api server down")] * 5
    api.set(*down, listing(endpoint_slice("s1", [("10.1.0.1", True)]), rv="150"))
    with caplog.at_level(logging.DEBUG, logger="higgs_gateway.discovery.kubernetes"):
        api.send(ConnectionResetError("watch cut"))
        await eventually(lambda: api.watch_versions[-1:] == ["150"])
    await discovery.stop()
    assert api.list_calls == 7
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "keeping 1 worker(s)" in warnings[0], warnings
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "answers again" in r.getMessage()]
    assert len(infos) == 1, infos


def test_discovery_config_needs_its_mode_fields() -> None:
    with pytest.raises(ValueError, match="dns_name"):
        DiscoveryConfig(mode="dns")
    with pytest.raises(ValueError, match="exactly one"):
        DiscoveryConfig(mode="kubernetes")
    with pytest.raises(ValueError, match="exactly one"):
        DiscoveryConfig(mode="kubernetes", service="s", label_selector="a=b")


# ---- the official client adapter, with a fake HTTP layer -------------------------------


class FakeHttpResponse:
    """What the official client hands back with _preload_content=False (urllib3-like)."""

    def __init__(self, body: bytes = b"", lines: list[dict[str, Any]] | None = None) -> None:
        self.status = 200
        self.data = body
        self._chunks = [(json.dumps(line) + "\n").encode() for line in lines or []]

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        yield from self._chunks

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


async def test_official_api_lists_and_watches_through_the_client() -> None:
    pytest.importorskip("kubernetes")
    calls: list[dict[str, Any]] = []
    slices = listing(endpoint_slice("s1", [("10.1.0.1", True)]), rv="100")
    events = [
        {"type": "ADDED", "object": endpoint_slice("s1", [("10.1.0.1", True)], rv="101")},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}},
    ]

    def list_fn(namespace: str, **kwargs: Any) -> FakeHttpResponse:
        calls.append({"namespace": namespace, **kwargs})
        if kwargs.get("watch"):
            return FakeHttpResponse(lines=events)
        return FakeHttpResponse(body=json.dumps(slices).encode())

    api = OfficialResourceApi(list_fn, "higgs", "kubernetes.io/service-name=higgs-worker-low-latency")
    assert await api.list() == slices
    seen = []
    with pytest.raises(WatchExpired):
        async for event in api.watch("100", timeout_s=60):
            seen.append(event)
    assert seen == [events[0]]
    assert calls[0]["label_selector"] == "kubernetes.io/service-name=higgs-worker-low-latency"
    assert calls[1]["namespace"] == "higgs" and calls[1]["resource_version"] == "100"
    assert calls[1]["watch"] is True and calls[1]["timeout_seconds"] == 60
