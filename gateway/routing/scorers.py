"""Scorers: how much a policy likes a candidate worker (higher is better).

Ties are left to the picker, which breaks them round-robin.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.types.view import WorkerLoad

Scorer = Callable[[WorkerLoad], int]


def fewest_in_flight(worker: WorkerLoad) -> int:
    """Spread load inside a pool: the worker carrying the fewest requests wins."""
    return -worker.load


def most_free_slots(worker: WorkerLoad) -> int:
    """Profile-blind: the worker with the most room left wins (differs when slots differ)."""
    return worker.free


def indifferent(worker: WorkerLoad) -> int:
    """Every candidate ties, so the picker's round-robin alone decides."""
    return 0
