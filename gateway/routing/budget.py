"""How long a `latency` request may queue for a low-latency slot before it may spill."""

from __future__ import annotations

from gateway.config import RoutingThresholds
from gateway.types.view import RequestInfo


def latency_queue_budget_s(request: RequestInfo, thresholds: RoutingThresholds) -> float:
    """x-sla-ttfp-ms x ttfp_budget_queue_fraction when the client sent one, else the default.

    The rest of a client's TTFP budget is left for the worker's own time to first packet.
    """
    if request.ttfp_budget_ms is not None:
        return max(0.0, request.ttfp_budget_ms) * thresholds.ttfp_budget_queue_fraction / 1000.0
    return thresholds.latency_queue_budget_ms / 1000.0
