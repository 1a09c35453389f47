"""K gateway replicas in front of the same simulated workers, requests dealt round robin.

Each replica is a full ``SimGateway`` (its own admission queue, policy memory and learned
curves) over the shared workers. Two models of what a replica knows of the others:

- ``shared`` (``state.backend: redis``): every replica counts every lease at once, and a
  release anywhere wakes every queue. Modelled as exact: the real fleet view is a pub/sub
  message old, and its atomic take makes a capped slot's double hand-out impossible.
- ``reports``: a replica knows its own leases exactly and the others' only from the
  workers' load reports, taken every ``report_interval_s`` ("reported minus ours", as
  ``pools.worker.Worker.fresh_report`` reads them). What replicas did before the view.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal

from gateway.bench.client import RequestResult, RequestSpec
from gateway.config import AdmissionConfig, PolicyName, RoutingThresholds
from gateway.simulator.fleet import SimGateway, SimSlot, SimWorker, WorkerPlan
from gateway.types.view import LoadView, WorkerLoad

ViewModel = Literal["shared", "reports"]
REPORT_INTERVAL_S = 1.0  # load_reports.interval_s's default


class _ReportingReplica(SimGateway):
    """A replica that sees the others only through the workers' periodic reports."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.own: dict[str, int] = dict.fromkeys(self.workers, 0)
        self.reported: dict[str, tuple[int, int]] = {}  # worker -> (its load, ours then)

    def reserve(self, worker_id: str) -> SimSlot:
        self.own[worker_id] += 1
        slot = SimSlot(self.workers[worker_id], lambda: self._released(worker_id))
        return slot

    def _released(self, worker_id: str) -> None:
        self.own[worker_id] -= 1
        self.admission.capacity_changed()

    def take_report(self) -> None:
        self.reported = {w.worker_id: (w.inflight, self.own[w.worker_id]) for w in self.workers.values()}
        self.admission.capacity_changed()  # a report may show room the others freed

    def loads(self) -> LoadView:
        workers = []
        for w in self.workers.values():
            own = self.own[w.worker_id]
            load, ours_then = self.reported.get(w.worker_id, (own, own))
            workers.append(WorkerLoad(w.worker_id, w.pool, w.routable, own, max(0, load - ours_then) + own, w.slots))
        return LoadView(tuple(workers))


class SimReplicas:
    """A ``SpeechClient`` for the bench: K replicas, each request to the next one."""

    def __init__(
        self,
        plans: Sequence[WorkerPlan],
        replicas: int,
        view: ViewModel = "shared",
        policy: PolicyName = "adaptive",
        thresholds: RoutingThresholds | None = None,
        admission: AdmissionConfig | None = None,
        report_interval_s: float = REPORT_INTERVAL_S,
    ) -> None:
        loop = asyncio.get_running_loop()
        workers: dict[str, SimWorker] = {}
        for index, plan in enumerate(plans):
            worker = SimWorker(f"{plan.pool.value}-{index}", plan, loop)
            workers[worker.worker_id] = worker
        kind = SimGateway if view == "shared" else _ReportingReplica
        self.replicas = [kind(plans, policy, thresholds, admission, workers=workers) for _ in range(replicas)]
        if view == "shared":
            for replica in self.replicas:
                replica.on_slot_released = self._wake_all  # the release reaches every replica
        self._reporter = loop.create_task(self._report(report_interval_s)) if view == "reports" else None
        self._next = 0

    def _wake_all(self) -> None:
        for replica in self.replicas:
            replica.admission.capacity_changed()

    async def _report(self, interval_s: float) -> None:
        while True:
            for replica in self.replicas:
                assert isinstance(replica, _ReportingReplica)
                replica.take_report()
            await asyncio.sleep(interval_s)

    async def speak(self, spec: RequestSpec, phase_start: float) -> RequestResult:
        replica = self.replicas[self._next]
        self._next = (self._next + 1) % len(self.replicas)
        return await replica.speak(spec, phase_start)

    async def close(self) -> None:
        return None
