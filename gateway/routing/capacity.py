"""Limits the policies derive from slots: the balanced threshold and the latency reserve."""

from __future__ import annotations

from gateway.config import RoutingThresholds
from gateway.types import PoolName
from gateway.types.view import LoadView


def balanced_threshold(thresholds: RoutingThresholds, view: LoadView) -> int:
    """Fleet load at which `balanced` leaves low-latency; None = low-latency's routable capacity."""
    if thresholds.balanced_threshold is not None:
        return thresholds.balanced_threshold
    return view.capacity(PoolName.LOW_LATENCY)


def latency_reserve(thresholds: RoutingThresholds, view: LoadView) -> int:
    """Low-latency slots that `throughput` requests must leave free (pool-wide)."""
    return thresholds.reserve_for_latency * len(view.routable(PoolName.LOW_LATENCY))
