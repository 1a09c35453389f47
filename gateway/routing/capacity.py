"""The balanced threshold the policies derive from slots (the latency reserve is reserve.py's)."""

from __future__ import annotations

from gateway.config import RoutingThresholds
from gateway.types import PoolName
from gateway.types.view import LoadView


def balanced_threshold(thresholds: RoutingThresholds, view: LoadView) -> int:
    """Fleet load at which `balanced` leaves low-latency; None = low-latency's routable capacity."""
    if thresholds.balanced_threshold is not None:
        return thresholds.balanced_threshold
    return view.capacity(PoolName.LOW_LATENCY)
