"""Where a request goes when its worker failed before the first byte.

Not a routing decision in the policy's sense: the request was already admitted and may
have waited, so it takes any free slot on a worker not yet tried (no queue to join, no
waiter to overtake: it was admitted before them), its own pool first. ``Admission.retry``
calls this over the same view admission routes on, slots handed to waiters included.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Final

from gateway.types import PoolName
from gateway.types.view import LoadView, WorkerLoad

RETRY_OTHER_WORKER: Final = "retry_other_worker"


def pick_retry_worker(view: LoadView, tried: Set[str], prefer: PoolName | None) -> WorkerLoad | None:
    candidates = [w for w in view.workers if w.routable and w.free > 0 and w.worker_id not in tried]
    if not candidates:
        return None
    # Own pool first, then the least loaded.
    return min(candidates, key=lambda w: (w.pool != prefer, w.load))
