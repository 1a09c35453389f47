"""The load view the policy decides on: live loads plus each worker's curve and cap.

The fleet knows loads; the performance model publishes curves; the operator's run-time
caps live in the routing thresholds. Production and the fleet simulator both build the
view the policy sees through this one function, so they cannot disagree about it.
Building it only reads: the curves are the performance model's last published snapshot.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.config import RoutingThresholds
from gateway.routing.performance import CurveSnapshot, PerformanceModel
from gateway.types.curve import Curve
from gateway.types.view import LoadView, WorkerLoad


class RoutingSnapshot:
    """``() -> LoadView`` for admission: the fleet's loads with curves and caps attached."""

    def __init__(
        self,
        loads: Callable[[], LoadView],
        performance: PerformanceModel,
        thresholds: Callable[[], RoutingThresholds],
    ) -> None:
        self._loads = loads
        self._performance = performance
        self._thresholds = thresholds

    def __call__(self) -> LoadView:
        return routing_view(self._loads(), self._performance.snapshot(), self._thresholds())


def routing_view(loads: LoadView, curves: CurveSnapshot, thresholds: RoutingThresholds) -> LoadView:
    caps = thresholds.max_per_worker
    workers = tuple(_decorated(w, curves.curve(w.worker_id, w.pool), caps.get(w.pool)) for w in loads.workers)
    return LoadView(workers, curves.latency_places)


def _decorated(worker: WorkerLoad, curve: Curve | None, cap: int | None) -> WorkerLoad:
    if curve is None and cap is None:
        return worker
    # Built directly (``dataclasses.replace`` costs twice as much, per worker per decision).
    slots = worker.slots if cap is None else cap
    return WorkerLoad(worker.worker_id, worker.pool, worker.routable, worker.inflight, worker.reported, slots, curve)
