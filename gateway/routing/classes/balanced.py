"""`balanced` (the default class): the lowest predicted cost to the fleet.

- **Where**: the worker with the lowest own end-to-end time (``ttfp + frames x step``)
  plus the delay its slower step adds to the streams already there (``fastest_finish``).
  At low load the own-time term dominates and everything stays on low-latency; under load
  the delay term spreads the fleet the way that maximises its throughput.
- **Room**: the hard cap; every stream there stays at or under ``balanced_rtf_ceiling``
  (an idle worker always has room); on a low-latency worker, the latency reserve left free
  below the cap.
- **Waits**: ``queued_ll_reserved`` when the only room left is the latency reserve, else
  ``queued_all_full``; it never spills (every worker is already a candidate).
"""

from __future__ import annotations

from gateway.routing.classes import Context, SlaRules
from gateway.routing.filters import WITHIN_CAP, LeavesLatencyReserve, UnderRtfCeiling
from gateway.routing.scorers import own_time_plus_delay
from gateway.routing.stages import Plan, Stage
from gateway.types import SlaClass, reasons
from gateway.types.codec import FRAMES_PER_SECOND
from gateway.types.curve import audio_seconds_for
from gateway.types.view import RequestInfo


def plan(request: RequestInfo, context: Context) -> Plan:
    frames = audio_seconds_for(request.input_chars) * FRAMES_PER_SECOND
    room = (WITHIN_CAP, UnderRtfCeiling(context.thresholds.balanced_rtf_ceiling), LeavesLatencyReserve(context.latency_reserve))
    return Plan((Stage(room, own_time_plus_delay(frames), reasons.FASTEST_FINISH, own_time=True),), reasons.QUEUED_ALL_FULL)


RULES = SlaRules(SlaClass.BALANCED, plan)
