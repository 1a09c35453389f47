"""A slot admission chose and already holds: what ``Admission.admit`` returns.

Admission takes the slot (the fleet's lease) in the same step it decides, before the
decision leaves it, so nothing can run between the choice and the slot being held: there
is no window to guard by convention. The reservation then has exactly one owner at a
time: the caller of ``admit``, who hands it to the relay, whose open stream releases it
once, whatever way the request ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gateway.types.decision import Decision


class Slot(Protocol):
    """A held place on one worker, counted in its load until released (once; again is a no-op)."""

    def release(self) -> None: ...


SlotT = TypeVar("SlotT", bound=Slot)


@dataclass(frozen=True, eq=False, slots=True)
class Reservation(Generic[SlotT]):
    decision: Decision  # a ROUTE: where, why, and what the policy predicted
    slot: SlotT  # already held
    waited_s: float = 0.0  # arrival in admission to the slot being held (0.0: the fast path)

    @property
    def worker_id(self) -> str:
        assert self.decision.worker_id is not None
        return self.decision.worker_id

    def release(self) -> None:
        self.slot.release()
