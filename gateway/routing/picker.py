"""The picker: the best-scored candidate, with the one tie rule every policy uses.

Scores within ``TIE`` (relative) of the best are a tie: learned curves carry noise, and two
workers of the same hardware must share the work instead of one winning on a rounding
difference. Ties go round-robin: the first worker id after the one last picked in the same
scope (wrapping). Ordering by id, not by the view's order, keeps the rotation stable when
the view is rebuilt in another order.

The rotation is the only memory picking needs; each policy owns its ``TieBreak``.

Voice affinity comes before the rotation. When some candidates are ``preferred`` (they
probably hold the request's encoded reference), every other candidate's score grows by
``cold_cost``: the encode of the clip it would have to do first, in the score's units. A
preferred candidate whose score ties with the best of those wins, the best-scored of them
first; else the cold ones tie and rotate on their own scores as without a preference. So a
warm worker wins while its queue costs less than the encode, and a much busier one loses to
a cold one. Only the candidates the class's filters kept are scored, so the class's caps,
ceilings and reserve hold whatever the preference.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.types.view import WorkerLoad

TIE = 0.03


class TieBreak:
    """A policy's round-robin memory: the worker last picked in each scope (a pool, or the fleet)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[str, str] = {}

    def last(self, scope: str) -> str | None:
        return self._last.get(scope)

    def pick(
        self,
        workers: Sequence[WorkerLoad],
        scores: Sequence[float],
        scope: str,
        preferred: frozenset[str] = frozenset(),
        cold_cost: float = 0.0,
    ) -> WorkerLoad | None:
        """The lowest score; among ties, the next worker id after the last pick. Remembered."""
        if not workers:
            return None
        if preferred and any(w.worker_id in preferred for w in workers):
            costs = [s if w.worker_id in preferred else s + cold_cost for w, s in zip(workers, scores, strict=True)]
            best_cost = min(costs)
            near = best_cost + TIE * abs(best_cost)
            warm = [(c, w.worker_id, w) for w, c in zip(workers, costs, strict=True) if w.worker_id in preferred and c <= near]
            if warm:
                chosen = min(warm, key=lambda entry: entry[:2])[2]
                self._last[scope] = chosen.worker_id
                return chosen
        best = min(scores)
        bound = best + TIE * abs(best)
        tied = [w for w, s in zip(workers, scores, strict=True) if s <= bound]
        chosen = tied[0]
        if len(tied) > 1:
            last = self._last.get(scope, "")
            chosen = min(tied, key=lambda w: (w.worker_id <= last, w.worker_id))
        self._last[scope] = chosen.worker_id
        return chosen
