"""Worker discovery: which workers a pool has when they run outside this gateway.

One ``Discovery`` per pool, chosen by ``DiscoveryConfig.mode``:

- ``static``: the URLs in ``PoolConfig.workers``, reported once;
- ``dns``: every address behind a name (a headless Service), re-resolved periodically
  (``discovery_dns``);
- ``kubernetes``: ready endpoints of a Service's EndpointSlices, or ready pods matching
  a label selector, watched through the API server (``discovery_k8s``).

Discovery only reports membership to the ``WorkerSink``; the fleet probes, warms and
replays voices to a new worker before it is routable, and drains one that disappears.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from gateway.config import PoolConfig
from gateway.pools.sink import WorkerSink
from gateway.types import PoolName

if TYPE_CHECKING:
    from gateway.pools.discovery_dns import Resolver
    from gateway.pools.discovery_k8s import ResourceApi

log = logging.getLogger("higgs_gateway.discovery")


class Discovery(Protocol):
    async def start(self) -> None:
        """Report the workers known now, then keep following changes in the background."""

    async def stop(self) -> None:
        """Stop following changes; workers already reported stay in the fleet."""


def host_port(host: str, port: int) -> str:
    """``host:port`` with IPv6 literals bracketed, as in a URL."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def endpoint_worker_id(pool: PoolName, host: str, port: int) -> str:
    """Stable id of a discovered worker: the same address always maps to the same id.

    Stability matters: the fleet persists operator drains by id, and a DNS answer that
    merely changes order must not look like new workers.
    """
    return f"{pool.value}@{host_port(host, port)}"


def endpoint_url(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://{host_port(host, port)}"


def url_worker_id(pool: PoolName, url: str) -> str:
    """Id of a statically configured worker, in the same shape as a discovered one."""
    parts = urlsplit(url)
    return f"{pool.value}@{parts.netloc}{parts.path.rstrip('/')}"


class Membership:
    """The workers one source has reported for a pool; turns desired sets into sink calls.

    Only differences reach the sink, so a re-resolution or re-list that finds the same
    workers costs nothing downstream.
    """

    def __init__(self, pool: PoolName, sink: WorkerSink) -> None:
        self.pool = pool
        self._sink = sink
        self._current: dict[str, str] = {}  # worker id -> url

    @property
    def workers(self) -> dict[str, str]:
        return dict(self._current)

    def reconcile(self, desired: Mapping[str, str]) -> None:
        # Leavers first, so a pool never briefly counts a replaced worker twice. A sink call
        # that raises is logged and not recorded: the next reconcile retries it, and the
        # discovery loop that called us keeps running.
        for worker_id in sorted(self._current.keys() - desired.keys()):
            log.info("worker %s (%s) left pool %s", worker_id, self._current[worker_id], self.pool.value)
            if self._call(self._sink.remove_worker, worker_id):
                del self._current[worker_id]
        for worker_id in sorted(desired.keys()):
            url = desired[worker_id]
            if self._current.get(worker_id) != url:
                log.info("worker %s joined pool %s at %s", worker_id, self.pool.value, url)
                if self._call(self._sink.add_worker, self.pool, worker_id, url):
                    self._current[worker_id] = url

    def _call(self, method: Callable[..., None], *args: object) -> bool:
        try:
            method(*args)
        except Exception:
            log.exception("pool %s: %s%r failed", self.pool.value, method.__name__, args)
            return False
        return True


class StaticDiscovery:
    """Fixed URLs from the config; a pool with ``launch`` has none (the supervisor reports)."""

    def __init__(self, pool: PoolName, urls: list[str], sink: WorkerSink) -> None:
        self._membership = Membership(pool, sink)
        self._urls = urls

    @property
    def workers(self) -> dict[str, str]:
        return self._membership.workers

    async def start(self) -> None:
        pool = self._membership.pool
        self._membership.reconcile({url_worker_id(pool, url): url.rstrip("/") for url in self._urls})

    async def stop(self) -> None:
        return None


def create_discovery(
    pool: PoolName,
    config: PoolConfig,
    sink: WorkerSink,
    *,
    resolver: Resolver | None = None,
    kube_api: ResourceApi | None = None,
) -> Discovery:
    """The discovery ``config.discovery.mode`` asks for; ``resolver``/``kube_api`` are for tests.

    The Kubernetes client is imported only when a pool uses that mode.
    """
    discovery = config.discovery
    if discovery.mode == "dns":
        from gateway.pools.discovery_dns import DnsDiscovery

        return DnsDiscovery(pool, discovery, sink, resolver=resolver)
    if discovery.mode == "kubernetes":
        from gateway.pools.discovery_k8s import KubernetesDiscovery

        return KubernetesDiscovery(pool, discovery, sink, api=kube_api)
    return StaticDiscovery(pool, config.workers, sink)
