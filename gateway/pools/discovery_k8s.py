"""Kubernetes discovery: a pool's workers are the ready endpoints of a Service, or ready pods.

List, then watch from the list's resourceVersion; when the watch ends (the API server
closes it after ``watch_timeout_s``, or answers 410 Gone because that version expired)
list again and reconcile, so a missed event can never leave the pool wrong for longer
than one watch. Errors (API server away, RBAC missing) keep the current workers and
retry every ``interval_s``: an API blip must not empty the pool.

The ``ResourceApi`` seam speaks the API server's JSON (dicts); the official ``kubernetes``
client behind it is imported only when this mode is used (the ``kubernetes`` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Literal, Protocol

from gateway.config import DiscoveryConfig
from gateway.pools.background import BackgroundLoop
from gateway.pools.sources import Membership, endpoint_url, host_port
from gateway.pools.sink import WorkerSink
from gateway.types import PoolName

log = logging.getLogger("higgs_gateway.discovery.kubernetes")

Kind = Literal["endpointslices", "pods"]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set on every EndpointSlice of a Service
Event = dict[str, Any]
MIN_WATCH_S = 1.0


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class ResourceApi(Protocol):
    """One collection (kind + namespace + label selector) of the API server."""

    async def list(self) -> dict[str, Any]:
        """The collection as JSON: ``{"metadata": {"resourceVersion"}, "items": [...]}``."""

    def watch(self, resource_version: str, timeout_s: float) -> AsyncIterator[Event]:
        """Events ``{"type", "object"}`` after ``resource_version``; ends when the server does."""


# ---- what counts as a ready worker ----------------------------------------------------

# identity -> (host, port). The identity is the pod's name where the API names one, so a
# pod that comes back at a new address is the same worker (same id, drain and metric
# series); otherwise the address itself.
Endpoints = dict[str, tuple[str, int]]


def slice_port(obj: dict[str, Any], port_name: str | None, default: int) -> int | None:
    """The port an EndpointSlice's endpoints serve on, as the slice itself says.

    ``port_name`` picks the named port (None when the slice has no such port: the slice
    is skipped, never guessed at); without it, the slice's only port, or among several
    the configured ``default`` if listed, else the first. No ports listed: ``default``.
    """
    ports = [p for p in obj.get("ports") or [] if isinstance(p, dict) and isinstance(p.get("port"), int)]
    ports = [p for p in ports if (p.get("protocol") or "TCP") == "TCP"]
    if port_name is not None:
        return next((p["port"] for p in ports if p.get("name") == port_name), None)
    if not ports:
        return default
    if len(ports) > 1 and any(p["port"] == default for p in ports):
        return default
    return int(ports[0]["port"])


def pod_port(obj: dict[str, Any], port_name: str | None, default: int) -> int | None:
    """A pod's named container port (None when it has none by that name), else ``default``."""
    if port_name is None:
        return default
    for container in (obj.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == port_name and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return None


def ready_endpoints(kind: Kind, obj: dict[str, Any], port_name: str | None = None, default_port: int = 8091) -> Endpoints:
    """The ready workers one EndpointSlice or Pod stands for, by identity."""
    if kind == "endpointslices":
        port = slice_port(obj, port_name, default_port)
        if port is None:
            return {}
        found: Endpoints = {}
        for endpoint in obj.get("endpoints") or []:
            # API contract: an absent ``ready`` means ready. Terminating endpoints are
            # not ready, so a pod being deleted is drained before it stops.
            if (endpoint.get("conditions") or {}).get("ready", True) is False:
                continue
            addresses = endpoint.get("addresses") or []
            target = endpoint.get("targetRef") or {}
            pod_name = target.get("name") if target.get("kind", "Pod") == "Pod" else None
            for address in addresses[:1] if pod_name else addresses:  # a pod: one worker
                found[str(pod_name) if pod_name else host_port(address, port)] = (address, port)
        return found
    metadata = obj.get("metadata") or {}
    status = obj.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    if not ready or metadata.get("deletionTimestamp") or not status.get("podIP"):
        return {}
    port = pod_port(obj, port_name, default_port)
    if port is None:
        return {}
    return {str(metadata.get("name") or host_port(status["podIP"], port)): (status["podIP"], port)}


def object_key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def resource_version(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


# ---- the discovery loop ---------------------------------------------------------------


class KubernetesDiscovery:
    def __init__(
        self,
        pool: PoolName,
        config: DiscoveryConfig,
        sink: WorkerSink,
        api: ResourceApi | None = None,
    ) -> None:
        if (config.service is None) == (config.label_selector is None):
            raise ValueError(f"pool {pool.value}: kubernetes discovery needs exactly one of service, label_selector")
        self._kind: Kind = "endpointslices" if config.service else "pods"
        selector = f"{SERVICE_NAME_LABEL}={config.service}" if config.service else str(config.label_selector)
        self._api = api or OfficialResourceApi.create(self._kind, config.namespace, selector)
        self._where = f"{self._kind} {selector!r} in namespace {config.namespace}"
        self._port = config.port
        self._port_name = config.port_name
        self._scheme = config.scheme
        self._retry_s = config.interval_s
        self._watch_timeout_s = config.watch_timeout_s
        self._membership = Membership(pool, sink)
        self._objects: dict[str, Endpoints] = {}  # object key -> its ready workers
        self._resource_version: str | None = None
        self._failing = False  # log an API outage once, and its end once (like DNS)
        self._loop = BackgroundLoop(f"k8s-discovery-{pool.value}")

    @property
    def workers(self) -> dict[str, str]:
        return self._membership.workers

    async def start(self) -> None:
        # The first list lands before start() returns, so the pool is not empty at boot.
        await self._relist()
        self._loop.start(self._run())

    async def stop(self) -> None:
        await self._loop.stop()

    async def _run(self) -> None:
        while True:
            if self._resource_version is None:  # the last list failed
                await asyncio.sleep(self._retry_s)
            else:
                loop = asyncio.get_running_loop()
                began = loop.time()
                try:
                    async for event in self._api.watch(self._resource_version, self._watch_timeout_s):
                        self._apply(event)
                    log.debug("watch of %s ended; re-listing", self._where)
                    self._recovered()
                    if loop.time() - began < MIN_WATCH_S:  # a server closing at once: no busy loop
                        await asyncio.sleep(min(self._retry_s, MIN_WATCH_S))
                except WatchExpired:
                    log.info("watch of %s expired; re-listing", self._where)
                except Exception as exc:  # noqa: BLE001 - any API failure: keep the pool, retry
                    self._note_failure(f"watch of {self._where} failed: {exc!r}")
                    await asyncio.sleep(self._retry_s)
            await self._relist()

    async def _relist(self) -> None:
        try:
            listing = await self._api.list()
        except Exception as exc:  # noqa: BLE001 - keep the pool; _run retries
            self._note_failure(f"cannot list {self._where}: {exc!r}")
            self._resource_version = None
            return
        self._recovered()
        items = listing.get("items") or []
        self._objects = {object_key(obj): self._endpoints(obj) for obj in items}
        self._resource_version = resource_version(listing) or ""
        self._reconcile()

    def _apply(self, event: Event) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired(obj.get("message", "resource version too old"))
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        version = resource_version(obj)
        if version:
            self._resource_version = version
        if kind == "BOOKMARK":
            return
        if kind == "DELETED":
            self._objects.pop(object_key(obj), None)
        elif kind in ("ADDED", "MODIFIED"):
            self._objects[object_key(obj)] = self._endpoints(obj)
        self._reconcile()

    def _endpoints(self, obj: dict[str, Any]) -> Endpoints:
        found = ready_endpoints(self._kind, obj, self._port_name, self._port)
        if not found and self._port_name is not None and (obj.get("endpoints") or self._kind == "pods"):
            log.debug("%s %s has no port named %r; skipped", self._kind, object_key(obj), self._port_name)
        return found

    def _reconcile(self) -> None:
        pool = self._membership.pool
        desired: dict[str, str] = {}
        for endpoints in self._objects.values():
            for identity, (host, port) in endpoints.items():
                # The same pod listed in two slices is one worker.
                desired[f"{pool.value}@{identity}"] = endpoint_url(self._scheme, host, port)
        self._membership.reconcile(desired)

    def _note_failure(self, why: str) -> None:
        # An API server outage fails every retry: say so once, then quietly until it ends.
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(level, "%s; keeping %d worker(s), retrying every %gs", why, len(self._membership.workers), self._retry_s)
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            log.info("%s: the API server answers again", self._where)
            self._failing = False


# ---- the official client behind the seam ----------------------------------------------

_END = object()


class OfficialResourceApi:
    """``ResourceApi`` over the official (blocking) ``kubernetes`` client.

    Calls run in threads; a watch streams from a daemon thread into the event loop, and
    closing the iterator shuts the watch's socket so the thread ends promptly.
    """

    def __init__(self, list_fn: Callable[..., Any], namespace: str, label_selector: str) -> None:
        self._list_fn = list_fn  # e.g. DiscoveryV1Api.list_namespaced_endpoint_slice
        self._namespace = namespace
        self._selector = label_selector

    @classmethod
    def create(cls, kind: Kind, namespace: str, label_selector: str, api_client: Any = None) -> OfficialResourceApi:
        try:
            from kubernetes import client
        except ImportError as exc:
            raise RuntimeError(
                "kubernetes discovery needs the official client: pip install 'higgs-gateway[kubernetes]'"
            ) from exc

        api_client = api_client or default_api_client()
        list_fn: Callable[..., Any]
        if kind == "endpointslices":
            list_fn = client.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice
        else:
            list_fn = client.CoreV1Api(api_client).list_namespaced_pod
        return cls(list_fn, namespace, label_selector)

    async def list(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._list_blocking)

    def _list_blocking(self) -> dict[str, Any]:
        response = self._list_fn(
            self._namespace, label_selector=self._selector, _preload_content=False, _request_timeout=30
        )
        listing: dict[str, Any] = json.loads(response.data)
        return listing

    async def watch(self, resource_version: str, timeout_s: float) -> AsyncIterator[Event]:
        from kubernetes import watch

        watcher = watch.Watch()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stream = watcher.stream(
            self._list_fn,
            self._namespace,
            label_selector=self._selector,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=max(1, int(timeout_s)),
            # A silent connection (no bookmarks either) must not hang the thread forever.
            _request_timeout=(10, timeout_s + 30),
        )
        thread = threading.Thread(target=_pump, args=(stream, loop, queue), daemon=True, name="k8s-watch")
        thread.start()
        try:
            while (item := await queue.get()) is not _END:
                if isinstance(item, BaseException):
                    if getattr(item, "status", None) == 410:
                        raise WatchExpired(str(item)) from item
                    raise item
                yield {"type": item["type"], "object": item.get("raw_object", item.get("object"))}
        finally:
            watcher.stop()


def _pump(stream: Iterable[Event], loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]) -> None:
    """Runs in the watch thread: hand every event (or the failure, then the end) to the loop."""
    item: Any = _END
    try:
        for event in stream:
            loop.call_soon_threadsafe(queue.put_nowait, event)
    except BaseException as exc:  # noqa: BLE001 - re-raised on the loop side
        item = exc
    with contextlib.suppress(RuntimeError):  # the loop closed first: nobody is listening
        loop.call_soon_threadsafe(queue.put_nowait, item)
        if item is not _END:
            loop.call_soon_threadsafe(queue.put_nowait, _END)


def default_api_client() -> Any:
    """In a pod: its service account; elsewhere: the local kubeconfig."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)
    return client.ApiClient(configuration)
