"""`pinned`: a request the client pinned to one pool (``x-gateway-pin-pool``).

Off unless ``routing.allow_pool_pin`` is on: the demo's *Compare* uses it to play the two
profiles side by side on an idle fleet, where routing by class would rightly send both
sides to low-latency. Not for production traffic: a pinned request ignores its class.

- **Where**: the pinned pool's worker with the lowest predicted TTFP (``pinned_pool``).
- **Room**: the hard cap; nothing else (no ceiling, no latency reserve).
- **Waits**: ``queued_all_full`` while every worker of that pool is at its cap.
"""

from __future__ import annotations

from gateway.routing.classes import Context, SlaRules
from gateway.routing.filters import WITHIN_CAP, InPool
from gateway.routing.scorers import predicted_ttfp
from gateway.routing.stages import Plan, Stage
from gateway.types import SlaClass, reasons
from gateway.types.view import RequestInfo


def plan(request: RequestInfo, context: Context) -> Plan:
    assert request.pool_pin is not None  # the policy routes here only pinned requests
    return Plan((Stage((InPool(request.pool_pin), WITHIN_CAP), predicted_ttfp, reasons.PINNED_POOL, own_time=True),), reasons.QUEUED_ALL_FULL)


# The class is the request's own; only the plan differs (the class still names its queue).
RULES = SlaRules(SlaClass.BALANCED, plan)
