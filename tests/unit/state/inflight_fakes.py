"""An in-memory ``InflightStore`` on a fake clock, with switches for "unreachable" and "slow"."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from gateway.pools.worker import Worker
from gateway.state.inflight import Take
from gateway.types import PoolName


class Unreachable(ConnectionError):
    pass


class FakeInflightStore:
    def __init__(self) -> None:
        self.now = 0.0
        self.leases: dict[str, dict[str, float]] = {}  # worker -> lease id -> expiry
        self.reachable = True
        self.hold_reserves: asyncio.Event | None = None  # set: reserves wait for it
        self.hold_answers: asyncio.Event | None = None  # set: reserves run, their answers wait for it
        self._followers: list[tuple[Callable[[str, str, str], None], asyncio.Event]] = []
        self.reserves = 0
        self.release_calls = 0

    def _check(self) -> None:
        if not self.reachable:
            raise Unreachable("store down")

    def _live(self, worker_id: str) -> dict[str, float]:
        leases = self.leases.setdefault(worker_id, {})
        for lease_id in [i for i, expiry in leases.items() if expiry <= self.now]:
            del leases[lease_id]
        return leases

    def _publish(self, op: str, worker_id: str, lease_id: str) -> None:
        for on_delta, _ in self._followers:
            on_delta(op, worker_id, lease_id)

    def go_down(self) -> None:
        self.reachable = False
        for _, lost in self._followers:
            lost.set()

    async def reserve(self, worker_id: str, lease_id: str, ttl_s: float, take: Take) -> tuple[bool, list[str]]:
        self.reserves += 1
        if self.hold_reserves is not None:
            await self.hold_reserves.wait()
        self._check()
        leases = self._live(worker_id)
        before = list(leases)
        stands = take.stands(before)
        if stands:
            leases[lease_id] = self.now + ttl_s
            self._publish("+", worker_id, lease_id)
        if self.hold_answers is not None:
            await self.hold_answers.wait()
        return stands, before

    def write_unannounced(self, worker_id: str, lease_id: str) -> None:
        """A lease in the store whose message has not reached the followers (yet, or again)."""
        self._live(worker_id)[lease_id] = self.now + 60.0

    async def release(self, leases: Sequence[tuple[str, str]]) -> None:
        self._check()
        self.release_calls += 1
        for worker_id, lease_id in leases:
            if self._live(worker_id).pop(lease_id, None) is not None:
                self._publish("-", worker_id, lease_id)

    async def renew_and_read(
        self, held: Mapping[str, Sequence[str]], workers: Sequence[str], ttl_s: float
    ) -> dict[str, list[str]]:
        self._check()
        for worker_id, ids in held.items():
            for lease_id in ids:
                self._live(worker_id)[lease_id] = self.now + ttl_s
        return {w: list(self._live(w)) for w in dict.fromkeys([*workers, *held])}

    async def follow(
        self, on_delta: Callable[[str, str, str], None], on_subscribed: Callable[[], Awaitable[None]]
    ) -> None:
        self._check()
        lost = asyncio.Event()
        entry = (on_delta, lost)
        self._followers.append(entry)
        try:
            await on_subscribed()
            await lost.wait()
            raise Unreachable("connection lost")
        finally:
            self._followers.remove(entry)

    async def close(self) -> None:
        return None


class FakeMembers:
    def __init__(self, *workers: Worker) -> None:
        self._workers = {w.worker_id: w for w in workers}

    @property
    def workers(self) -> Iterable[Worker]:
        return self._workers.values()

    def get(self, worker_id: str) -> Worker | None:
        return self._workers.get(worker_id)


def worker(worker_id: str, slots: int = 1) -> Worker:
    return Worker(worker_id, PoolName.LOW_LATENCY, f"http://{worker_id}", slots)
