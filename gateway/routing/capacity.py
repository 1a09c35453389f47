"""Capacity as slots: how many requests each worker should carry, and the limits derived from it."""

from __future__ import annotations

from gateway.config import RoutingThresholds
from gateway.types import PoolName
from gateway.types.view import LoadView

def default_slots(pool: PoolName, configured: int | None, max_num_seqs: int) -> int:
    """Slots per worker from ``pools.<pool>.slots_per_worker`` and the profile's max_num_seqs.

    Unset, a worker may carry up to max_num_seqs: the `adaptive` policy decides from
    predictions how much of that to use, so slots are only a hard cap. low_latency: never
    above max_num_seqs (the graph-captured engine cannot run more). high_throughput: a
    configured value above max_num_seqs is kept on purpose (the worker queues the surplus).
    """
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be at least 1, got {max_num_seqs}")
    if configured is not None and configured < 1:
        raise ValueError(f"slots_per_worker must be at least 1, got {configured}")
    if pool == PoolName.LOW_LATENCY:
        return min(configured or max_num_seqs, max_num_seqs)
    return configured or max_num_seqs


def balanced_threshold(thresholds: RoutingThresholds, view: LoadView) -> int:
    """Fleet load at which `balanced` leaves low-latency; None = low-latency's routable capacity."""
    if thresholds.balanced_threshold is not None:
        return thresholds.balanced_threshold
    return view.capacity(PoolName.LOW_LATENCY)


def latency_reserve(thresholds: RoutingThresholds, view: LoadView) -> int:
    """Low-latency slots that `throughput` requests must leave free (pool-wide)."""
    return thresholds.reserve_for_latency * len(view.routable(PoolName.LOW_LATENCY))
