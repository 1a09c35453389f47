"""Kubernetes discovery: a pool's workers are the ready endpoints of a Service, or ready pods.

List, then watch from the list's resourceVersion. Each watch lasts ``watch_timeout_s``;
then, or when the API server answers 410 Gone (that version was compacted away), the
pool is listed again and reconciled, so a missed event can never leave the pool wrong
for longer than one watch, and a connection that went silent cannot hang discovery.
Errors (API server away, RBAC missing) keep the current workers and retry every
``interval_s``: an API blip must not empty the pool. An outage is logged once when it
starts and once when it ends, not once per failed retry.

The client is ``lightkube`` (the ``kubernetes`` extra), on asyncio: no thread. Chosen
over ``kubernetes_asyncio`` because it does this job with less: typed models for the two
kinds we read, pagination and the list's resourceVersion handled, in-cluster or
kubeconfig credentials (with the service-account token re-read as the kubelet rotates
it) in one call, and an install of a few MB where the generated clients (official or
asyncio) weigh 50-130 MB. Its 1.x line runs on ``httpx2``, not on our ``httpx``: a small
second HTTP stack, preferred over pinning its superseded 0.x line. What we add around it:
the per-watch deadline (its watch otherwise resumes forever with no read timeout), and
the relist after 410 (its own retry would resume without telling us, so objects deleted
meanwhile would stay).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Literal, TypeAlias

from gateway.config import DiscoveryConfig
from gateway.pools.background import BackgroundLoop
from gateway.pools.sources import Membership, endpoint_url, host_port
from gateway.pools.sink import WorkerSink
from gateway.types import PoolName

try:
    from lightkube import ApiError, AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import Pod
    from lightkube.resources.discovery_v1 import EndpointSlice
except ImportError as exc:  # the module is imported only when a pool uses this mode
    raise ImportError("kubernetes discovery needs its client: pip install 'higgs-gateway[kubernetes]'") from exc

log = logging.getLogger("higgs_gateway.discovery.kubernetes")

# The seam tests use: an API client pointed at a fake API server (``create_discovery(kube_api=...)``).
# Discovery closes the client it was given when it stops.
ResourceApi: TypeAlias = AsyncClient
Kind = Literal["endpointslices", "pods"]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set on every EndpointSlice of a Service
# The server ends a watch only this long after our own deadline: ours is the one that
# normally ends it, the server's is the backstop for a client that vanished.
SERVER_TIMEOUT_MARGIN_S = 60


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


# ---- what counts as a ready worker ----------------------------------------------------

# identity -> (host, port). The identity is the pod's name where the API names one, so a
# pod that comes back at a new address is the same worker (same id, drain and metric
# series); otherwise the address itself.
Endpoints = dict[str, tuple[str, int]]


def slice_port(item: EndpointSlice, port_name: str | None, default: int) -> int | None:
    """The port an EndpointSlice's endpoints serve on, as the slice itself says.

    ``port_name`` picks the named port (None when the slice has no such port: the slice
    is skipped, never guessed at); without it, the slice's only port, or among several
    the configured ``default`` if listed, else the first. No ports listed: ``default``.
    """
    ports = [p for p in item.ports or [] if p.port is not None and (p.protocol or "TCP") == "TCP"]
    if port_name is not None:
        return next((p.port for p in ports if p.name == port_name), None)
    if not ports:
        return default
    if len(ports) > 1 and any(p.port == default for p in ports):
        return default
    return ports[0].port


def pod_port(item: Pod, port_name: str | None, default: int) -> int | None:
    """A pod's named container port (None when it has none by that name), else ``default``."""
    if port_name is None:
        return default
    containers = item.spec.containers if item.spec else []
    for container in containers:
        for port in container.ports or []:
            if port.name == port_name:
                return port.containerPort
    return None


def slice_endpoints(item: EndpointSlice, port_name: str | None = None, default_port: int = 8091) -> Endpoints:
    """The ready workers one EndpointSlice stands for, by identity."""
    port = slice_port(item, port_name, default_port)
    if port is None:
        return {}
    found: Endpoints = {}
    for endpoint in item.endpoints or []:
        # API contract: an absent ``ready`` means ready. Terminating endpoints are not
        # ready, so a pod being deleted is drained before it stops.
        if endpoint.conditions is not None and endpoint.conditions.ready is False:
            continue
        target = endpoint.targetRef
        pod_name = target.name if target is not None and (target.kind or "Pod") == "Pod" else None
        for address in endpoint.addresses[:1] if pod_name else endpoint.addresses:  # a pod: one worker
            found[pod_name or host_port(address, port)] = (address, port)
    return found


def pod_endpoints(item: Pod, port_name: str | None = None, default_port: int = 8091) -> Endpoints:
    """The worker a ready Pod stands for, by its name (empty while not ready or deleting)."""
    status, metadata = item.status, item.metadata
    if status is None or not status.podIP or (metadata is not None and metadata.deletionTimestamp):
        return {}
    if not any(c.type == "Ready" and c.status == "True" for c in status.conditions or []):
        return {}
    port = pod_port(item, port_name, default_port)
    if port is None:
        return {}
    name = metadata.name if metadata is not None else None
    return {name or host_port(status.podIP, port): (status.podIP, port)}


def object_key(item: EndpointSlice | Pod) -> str:
    metadata = item.metadata
    return f"{metadata.namespace or ''}/{metadata.name or ''}" if metadata is not None else "/"


def status_code(exc: BaseException) -> int | None:
    """The HTTP status an API failure carries: an ERROR event's Status, or the response's."""
    if isinstance(exc, ApiError) and exc.status is not None and exc.status.code:
        return int(exc.status.code)
    response: Any = getattr(exc, "response", None)  # an HTTP error before the watch streamed
    return getattr(response, "status_code", None)


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
        self._resource: type[EndpointSlice] | type[Pod] = EndpointSlice if config.service else Pod
        selector = f"{SERVICE_NAME_LABEL}={config.service}" if config.service else str(config.label_selector)
        # Sent verbatim, so any selector the API server accepts works: lightkube writes a
        # requirement without an operator ("exists") as its bare key.
        self._labels: dict[str, None] = {selector: None}
        self._namespace = config.namespace
        # In a pod: its service account; elsewhere: the local kubeconfig.
        self._api = api or AsyncClient(config=KubeConfig.from_env(), namespace=config.namespace)
        self._where = f"{self._kind} {selector!r} in namespace {config.namespace}"
        self._port = config.port
        self._port_name = config.port_name
        self._scheme = config.scheme
        self._retry_s = config.interval_s
        self._watch_timeout_s = config.watch_timeout_s
        self._membership = Membership(pool, sink)
        self._objects: dict[str, Endpoints] = {}  # object key -> its ready workers
        self._resource_version: str | None = None  # of the last list; None: it failed
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
        await self._api.close()

    async def _run(self) -> None:
        while True:
            if self._resource_version is None:  # the last list failed
                await asyncio.sleep(self._retry_s)
            else:
                try:
                    await self._watch(self._resource_version)
                    log.debug("watch of %s reached its deadline; re-listing", self._where)
                except WatchExpired:
                    log.info("watch of %s expired; re-listing", self._where)
                except Exception as exc:  # noqa: BLE001 - any API failure: keep the pool, retry
                    self._note_failure(f"watch of {self._where} failed: {exc!r}")
                    await asyncio.sleep(self._retry_s)
            await self._relist()

    async def _watch(self, version: str) -> None:
        """Apply events after ``version`` until the deadline; lightkube resumes a watch the
        server ends, from the last version it saw."""
        events = self._api.watch(
            self._resource,
            namespace=self._namespace,
            labels=self._labels,
            resource_version=version,
            server_timeout=math.ceil(self._watch_timeout_s) + SERVER_TIMEOUT_MARGIN_S,
        )
        deadline = asyncio.timeout(self._watch_timeout_s)
        try:
            async with deadline:
                async for change, item in events:
                    self._apply(change, item)
        except TimeoutError:
            if not deadline.expired():
                raise
        except Exception as exc:
            if status_code(exc) == 410:
                raise WatchExpired(str(exc)) from exc
            raise

    async def _relist(self) -> None:
        try:
            listing = self._api.list(self._resource, namespace=self._namespace, labels=self._labels)
            items = [item async for item in listing]
            version = listing.resourceVersion
        except Exception as exc:  # noqa: BLE001 - keep the pool; _run retries
            self._note_failure(f"cannot list {self._where}: {exc!r}")
            self._resource_version = None
            return
        self._recovered()
        self._objects = {object_key(item): self._endpoints(item) for item in items}
        self._resource_version = version
        self._reconcile()

    def _apply(self, change: str, item: EndpointSlice | Pod) -> None:
        if change == "DELETED":
            self._objects.pop(object_key(item), None)
        elif change in ("ADDED", "MODIFIED"):
            self._objects[object_key(item)] = self._endpoints(item)
        else:
            return
        self._reconcile()

    def _endpoints(self, item: EndpointSlice | Pod) -> Endpoints:
        if isinstance(item, EndpointSlice):
            found = slice_endpoints(item, self._port_name, self._port)
            named_but_missing = not found and self._port_name is not None and bool(item.endpoints)
        else:
            found = pod_endpoints(item, self._port_name, self._port)
            named_but_missing = not found and self._port_name is not None
        if named_but_missing:
            log.debug("%s %s has no port named %r; skipped", self._kind, object_key(item), self._port_name)
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
