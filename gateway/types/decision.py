"""What the routing policy answers: route to a worker now, wait, or reject."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.types import PoolName


class Action(StrEnum):
    ROUTE = "route"  # send it to ``worker_id`` now
    WAIT = "wait"  # nothing suitable is free; admission queues it and asks again
    REJECT = "reject"  # nothing can serve it (e.g. no routable worker at all)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str
    pool: PoolName | None = None
    worker_id: str | None = None
    # What the policy expected of this placement (predicting policies only): shown to the
    # client and compared with what happened (prediction-error metrics).
    predicted_ttfp_s: float | None = None
    predicted_rtf: float | None = None
