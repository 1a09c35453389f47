"""Filters: which workers may take a request at all (first stage of worker selection)."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.types.view import WorkerLoad


def routable(workers: Iterable[WorkerLoad]) -> tuple[WorkerLoad, ...]:
    """Ready workers only: starting, draining, ejected and failed ones take nothing new."""
    return tuple(w for w in workers if w.routable)


def with_free_slot(workers: Iterable[WorkerLoad]) -> tuple[WorkerLoad, ...]:
    """Workers carrying fewer requests than their slots (load counts other replicas' too)."""
    return tuple(w for w in workers if w.free > 0)


def candidates(workers: Iterable[WorkerLoad]) -> tuple[WorkerLoad, ...]:
    """The filters every policy applies before scoring."""
    return with_free_slot(routable(workers))
