"""Picker: the best-scored candidate, ties broken round-robin (last stage of selection)."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.routing.filters import candidates
from gateway.routing.model import PolicyState
from gateway.routing.scorers import Scorer, fewest_in_flight
from gateway.types.view import WorkerLoad


def pick(workers: Iterable[WorkerLoad], scorer: Scorer, last_picked: str | None) -> WorkerLoad | None:
    """Highest score; among equals, the first worker id after ``last_picked`` (wrapping).

    Ordering by id, not by the view's order, keeps the rotation stable when the view is
    rebuilt in a different order.
    """
    scored = [(scorer(w), w) for w in workers]
    if not scored:
        return None
    best = max(score for score, _ in scored)
    tied = sorted((w for score, w in scored if score == best), key=lambda w: w.worker_id)
    if last_picked is not None:
        for worker in tied:
            if worker.worker_id > last_picked:
                return worker
    return tied[0]


def choose(
    workers: Iterable[WorkerLoad],
    scope: str,
    state: PolicyState,
    scorer: Scorer = fewest_in_flight,
) -> tuple[WorkerLoad | None, PolicyState]:
    """Filter, score and pick in one ``scope`` (a pool or the fleet); remember the pick."""
    chosen = pick(candidates(workers), scorer, state.last_picked.get(scope))
    if chosen is None:
        return None, state
    return chosen, state.with_picked(scope, chosen.worker_id)
