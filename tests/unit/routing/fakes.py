"""Small builders and fakes shared by the routing tests."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gateway.config import RoutingThresholds
from gateway.types import PoolName, SlaClass
from gateway.types.curve import Curve
from gateway.types.view import LoadView, RequestInfo, WorkerLoad

LL = PoolName.LOW_LATENCY
HT = PoolName.HIGH_THROUGHPUT


def ll(worker_id: str, load: int = 0, slots: int = 4, routable: bool = True, reported: int | None = None) -> WorkerLoad:
    return WorkerLoad(worker_id, LL, routable, load, reported, slots)


def ht(worker_id: str, load: int = 0, slots: int = 64, routable: bool = True, reported: int | None = None) -> WorkerLoad:
    return WorkerLoad(worker_id, HT, routable, load, reported, slots)


def view(*workers: WorkerLoad) -> LoadView:
    return LoadView(tuple(workers))


def req(sla: str = "balanced", waited_out: bool = False, ttfp_ms: float | None = None) -> RequestInfo:
    return RequestInfo(SlaClass(sla), ttfp_ms, 100, waited_out)


def thresholds(**overrides: object) -> RoutingThresholds:
    return RoutingThresholds(**overrides)  # type: ignore[arg-type]


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeFleet:
    """Workers whose in-flight counts move only through lease() and release()."""

    workers: dict[str, WorkerLoad] = field(default_factory=dict)
    taken: int = 0  # slots ever reserved
    released: int = 0  # slots released through their reservation

    @classmethod
    def of(cls, *workers: WorkerLoad) -> FakeFleet:
        return cls({w.worker_id: w for w in workers})

    def snapshot(self) -> LoadView:
        return LoadView(tuple(self.workers.values()))

    def any_routable(self) -> bool:
        return any(w.routable for w in self.workers.values())

    def reserve(self, worker_id: str) -> FakeSlot:
        """Admission's ``reserve``: the slot is counted the moment it is taken."""
        worker = self.workers[worker_id]
        assert worker.load < worker.slots, f"{worker.worker_id} over its slots"
        self.workers[worker_id] = replace(worker, inflight=worker.inflight + 1)
        self.taken += 1
        return FakeSlot(self, worker_id)

    def release(self, worker_id: str) -> None:
        worker = self.workers[worker_id]
        self.workers[worker_id] = replace(worker, inflight=worker.inflight - 1)

    def set(self, worker_id: str, **changes: object) -> None:
        self.workers[worker_id] = replace(self.workers[worker_id], **changes)  # type: ignore[arg-type]

    def inflight(self, worker_id: str) -> int:
        return self.workers[worker_id].inflight


@dataclass(eq=False)
class FakeSlot:
    """A held slot; releasing it twice would be a bug in its owner, so it fails loudly."""

    fleet: FakeFleet
    worker_id: str
    done: bool = False

    def release(self) -> None:
        assert not self.done, f"slot on {self.worker_id} released twice"
        self.done = True
        self.fleet.released += 1
        self.fleet.release(self.worker_id)


def scaled(curve: Curve, step_factor: float, ttfp_factor: float) -> Curve:
    """A worker ``step_factor`` times slower per step (and ``ttfp_factor`` to first packet)."""
    return Curve(tuple(s * step_factor for s in curve.step_s), tuple(t * ttfp_factor for t in curve.ttfp_s))


def capacity(curve: Curve, rtf_ceiling: float, limit: int) -> int:
    """The test's oracle: the largest load whose streams stay under ``rtf_ceiling``."""
    return sum(1 for load in range(1, min(limit, curve.max_load) + 1) if curve.rtf(load) <= rtf_ceiling)
