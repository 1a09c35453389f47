"""`latency`: the lowest time to first packet, on the profile built for it.

- **Where**: the low-latency worker with the lowest predicted TTFP (``fastest_ttfp``),
  up to its hard cap: `latency` ignores RTF ceilings on low-latency (a latency stream is
  never turned away for running slower than the others would like).
- **Waits**: when every low-latency worker is at its cap, for its queue budget
  (``latency_queue_budget_ms``, or ``ttfp_budget_queue_fraction`` of the client's
  ``x-sla-ttfp-ms``): a low-latency slot freeing within it beats a high-throughput TTFP
  (``queued_ll_full``).
- **Spills**: once the budget is spent, the lowest predicted TTFP anywhere whose streams
  stay under ``balanced_rtf_ceiling`` (``spill_ll_full``); nothing: it waits until its
  deadline (``queued_all_full``). With no routable low-latency worker it goes straight
  there (``no_ll_workers``).
- **Its reserve**: the other classes leave places on every low-latency worker, as many
  as the `latency` traffic seen lately needs, up to ``reserve_for_latency``
  (``routing.reserve``), below the load
  whose streams stay *latency-grade*: ``latency_rtf_ceiling``, by default 1.4 x the best
  idle low-latency RTF (``latency_grade_rtf``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.config import RoutingThresholds
from gateway.routing.classes import Context, SlaRules
from gateway.routing.filters import WITHIN_CAP, InPool, UnderRtfCeiling
# Without an explicit ceiling, latency-grade means at most this much slower than the best
# idle low-latency worker (the same margin the adaptive reserve sizes its service time with).
from gateway.routing.reserve import LATENCY_RTF_MARGIN
from gateway.routing.scorers import predicted_ttfp
from gateway.routing.stages import Plan, Stage
from gateway.types import PoolName, SlaClass, reasons
from gateway.types.view import RequestInfo, WorkerLoad

LL = PoolName.LOW_LATENCY
_ON_LOW_LATENCY = InPool(LL)


def plan(request: RequestInfo, context: Context) -> Plan:
    anywhere = (WITHIN_CAP, UnderRtfCeiling(context.thresholds.balanced_rtf_ceiling))
    if not any(w.pool is LL for w in context.fleet):  # none at all (a retry's tried ones count)
        return Plan((Stage(anywhere, predicted_ttfp, reasons.NO_LL_WORKERS, own_time=True),), reasons.QUEUED_ALL_FULL)
    fastest = Stage((_ON_LOW_LATENCY, WITHIN_CAP), predicted_ttfp, reasons.FASTEST_TTFP, own_time=True)
    if not request.waited_out:
        return Plan((fastest,), reasons.QUEUED_LL_FULL)
    return Plan((fastest, Stage(anywhere, predicted_ttfp, reasons.SPILL_LL_FULL, own_time=True)), reasons.QUEUED_ALL_FULL)


def queue_budget_s(request: RequestInfo, thresholds: RoutingThresholds) -> float:
    """x-sla-ttfp-ms x ttfp_budget_queue_fraction when the client sent one, else the default.

    The gateway's own delay for the format and speed comes off the client's budget first;
    the rest of it is left for the worker's own time to first packet.
    """
    if request.ttfp_budget_ms is not None:
        budget_s = max(0.0, request.ttfp_budget_ms / 1000.0 - request.gateway_delay_s)
        return budget_s * thresholds.ttfp_budget_queue_fraction
    return thresholds.latency_queue_budget_ms / 1000.0


def latency_grade_rtf(thresholds: RoutingThresholds, workers: Sequence[WorkerLoad]) -> float:
    """The RTF a `latency` stream may run at (the operator's, or 1.4 x the best idle LL RTF)."""
    if thresholds.latency_rtf_ceiling is not None:
        return thresholds.latency_rtf_ceiling
    idle = [w.curve.rtf_s[0] for w in workers if w.curve is not None and w.pool is LL]
    return min(idle or [w.curve.rtf_s[0] for w in workers if w.curve is not None] or [float("inf")]) * LATENCY_RTF_MARGIN


RULES = SlaRules(SlaClass.LATENCY, plan, spill_after_s=queue_budget_s)
