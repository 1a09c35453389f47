"""What discovery sources share: stable worker ids from addresses, and the set of
workers one source has reported (only differences reach the ``WorkerSink``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from gateway.pools.sink import WorkerSink
from gateway.types import PoolName

log = logging.getLogger("higgs_gateway.discovery")


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
