"""The load view the policy decides on: live loads plus each worker's curve and cap.

The fleet knows loads; the performance model knows curves; the operator's run-time caps
live in the routing thresholds. Production and the fleet simulator both build the view
the policy sees through this one function, so they cannot disagree about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gateway.config import RoutingThresholds
from gateway.routing.curves import Curve
from gateway.routing.model import LoadView, WorkerLoad


def routing_view(loads: LoadView, curves: Mapping[str, Curve], thresholds: RoutingThresholds) -> LoadView:
    caps = thresholds.max_per_worker
    return LoadView(tuple(_decorated(w, curves.get(w.worker_id), caps.get(w.pool)) for w in loads.workers))


def _decorated(worker: WorkerLoad, curve: Curve | None, cap: int | None) -> WorkerLoad:
    if curve is None and cap is None:
        return worker
    return replace(worker, curve=curve, slots=worker.slots if cap is None else cap)
