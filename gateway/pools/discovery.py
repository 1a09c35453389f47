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

from typing import TYPE_CHECKING, Protocol

from gateway.config import PoolConfig
from gateway.pools.sink import WorkerSink
from gateway.pools.sources import Membership, url_worker_id
from gateway.types import PoolName

if TYPE_CHECKING:
    from gateway.pools.discovery_dns import Resolver
    from gateway.pools.discovery_k8s import ResourceApi


class Discovery(Protocol):
    async def start(self) -> None:
        """Report the workers known now, then keep following changes in the background."""

    async def stop(self) -> None:
        """Stop following changes; workers already reported stay in the fleet."""


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
