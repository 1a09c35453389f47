"""`throughput` (batch work): the most fleet audio per second.

- **Where**: the worker whose delivered audio-seconds per second grows the most with this
  request (its new rate minus the slowdown it causes the others: ``most_throughput``).
- **Room**: the hard cap; ``throughput_rtf_ceiling`` when set (default: up to the cap);
  on a low-latency worker, the latency reserve left free below its *latency-grade*
  capacity (the load whose streams stay under ``latency_rtf_ceiling``), so a batch burst
  never costs `latency` streams their RTF.
- **Waits**: ``queued_ll_reserved`` / ``queued_all_full``, like `balanced`; served after
  `balanced` in admission's order, until it has queued ``admission.promote_after_s``:
  from then on it is served (and placed) as `balanced`, in arrival order among them.
"""

from __future__ import annotations

from gateway.routing.classes import Context, SlaRules
from gateway.routing.classes.latency import latency_grade_rtf
from gateway.routing.filters import WITHIN_CAP, LeavesLatencyReserve, UnderRtfCeiling
from gateway.routing.scorers import throughput_lost
from gateway.routing.stages import Plan, Stage
from gateway.types import SlaClass, reasons
from gateway.types.view import RequestInfo


def plan(request: RequestInfo, context: Context) -> Plan:
    thresholds = context.thresholds
    ceiling = thresholds.throughput_rtf_ceiling
    reserve = LeavesLatencyReserve(context.latency_reserve, latency_grade_rtf(thresholds, context.fleet))
    room = (WITHIN_CAP, reserve) if ceiling is None else (WITHIN_CAP, UnderRtfCeiling(ceiling), reserve)
    return Plan((Stage(room, throughput_lost, reasons.MOST_THROUGHPUT),), reasons.QUEUED_ALL_FULL)


RULES = SlaRules(SlaClass.THROUGHPUT, plan, promoted_to=SlaClass.BALANCED)
