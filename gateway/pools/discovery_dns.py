"""DNS discovery: every A/AAAA address behind one name is a worker of the pool.

Meant for a Kubernetes headless Service (one record per ready pod) or any DNS that lists
the workers. The name is re-resolved every ``interval_s``; workers that appear are
added, workers whose address is gone are removed.

A failed or empty resolution keeps the current set. DNS cannot tell "the resolver had a
blip" from "every worker left" (a headless Service with no ready pods answers NXDOMAIN),
and dropping the whole pool on a blip would fail every request; a worker that really is
gone stops answering and the health checker ejects it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from gateway.config import DiscoveryConfig
from gateway.pools.background import BackgroundLoop
from gateway.pools.sources import Membership, endpoint_url, endpoint_worker_id
from gateway.pools.sink import WorkerSink
from gateway.types import PoolName

log = logging.getLogger("higgs_gateway.discovery.dns")

# (name, port) -> the addresses behind the name; raises OSError when resolution fails.
Resolver = Callable[[str, int], Awaitable[list[str]]]

# A resolver that hangs must not stall the loop past one period (and never past this).
MAX_RESOLVE_TIMEOUT_S = 5.0


async def getaddrinfo_resolver(name: str, port: int) -> list[str]:
    """Addresses from the system resolver (follows /etc/resolv.conf search domains)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


class DnsDiscovery:
    def __init__(
        self,
        pool: PoolName,
        config: DiscoveryConfig,
        sink: WorkerSink,
        resolver: Resolver | None = None,
    ) -> None:
        if not config.dns_name:
            raise ValueError(f"pool {pool.value}: discovery mode dns needs dns_name")
        self._name = config.dns_name
        self._port = config.port
        self._scheme = config.scheme
        self._interval_s = config.interval_s
        self._resolver = resolver or getaddrinfo_resolver
        self._membership = Membership(pool, sink)
        self._loop = BackgroundLoop(f"dns-discovery-{pool.value}")
        self._failing = False  # log a failure streak once, and its recovery once

    @property
    def workers(self) -> dict[str, str]:
        return self._membership.workers

    async def start(self) -> None:
        # The first answer lands before start() returns, so the pool is not empty at boot.
        await self.refresh()
        self._loop.start(self._refresh_forever())

    async def stop(self) -> None:
        await self._loop.stop()

    async def refresh(self) -> None:
        """Resolve once and reconcile; on failure keep the current workers."""
        pool = self._membership.pool
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that
            # lands as the resolver finishes, and stop() then waits for this loop forever.
            async with asyncio.timeout(min(self._interval_s, MAX_RESOLVE_TIMEOUT_S)):
                addresses = await self._resolver(self._name, self._port)
        except Exception as exc:  # noqa: BLE001 - whatever the resolver raised, keep the pool
            self._note_failure(f"cannot resolve {self._name}: {exc!r}")
            return
        if not addresses:
            self._note_failure(f"{self._name} resolved to no address")
            return
        if self._failing:
            log.info("pool %s: %s resolves again", pool.value, self._name)
            self._failing = False
        self._membership.reconcile(
            {
                endpoint_worker_id(pool, address, self._port): endpoint_url(self._scheme, address, self._port)
                for address in addresses
            }
        )

    def _note_failure(self, why: str) -> None:
        kept = len(self._membership.workers)
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(level, "pool %s: %s; keeping its %d known worker(s)", self._membership.pool.value, why, kept)
        self._failing = True

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.refresh()
