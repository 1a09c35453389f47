"""The picker: the best-scored candidate, with the one tie rule every policy uses.

Scores within ``TIE`` (relative) of the best are a tie: learned curves carry noise, and two
workers of the same hardware must share the work instead of one winning on a rounding
difference. Ties go round-robin: the first worker id after the one last picked in the same
scope (wrapping). Ordering by id, not by the view's order, keeps the rotation stable when
the view is rebuilt in another order.

The rotation is the only memory picking needs; each policy owns its ``TieBreak``.

Voice affinity comes before the rotation: a ``preferred`` candidate (it probably holds the
request's encoded reference) wins when its score, less ``bonus`` (what the encode it skips
is worth, in the score's units), ties with the best; the best-scored of them first. Only the
candidates the class's filters kept are scored, so the class's caps, ceilings and reserve
hold whatever the preference.
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
        bonus: float = 0.0,
    ) -> WorkerLoad | None:
        """The lowest score; among ties, the next worker id after the last pick. Remembered."""
        if not workers:
            return None
        best = min(scores)
        if preferred:
            near = best + TIE * abs(best) + bonus
            warm = [(s, w.worker_id, w) for w, s in zip(workers, scores, strict=True) if w.worker_id in preferred and s <= near]
            if warm:
                chosen = min(warm, key=lambda entry: entry[:2])[2]
                self._last[scope] = chosen.worker_id
                return chosen
        bound = best + TIE * abs(best)
        tied = [w for w, s in zip(workers, scores, strict=True) if s <= bound]
        chosen = tied[0]
        if len(tied) > 1:
            last = self._last.get(scope, "")
            chosen = min(tied, key=lambda w: (w.worker_id <= last, w.worker_id))
        self._last[scope] = chosen.worker_id
        return chosen
