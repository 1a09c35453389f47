"""Deadline sentences: the later sentences of a voice session (``/v1/audio/speech/stream``).

The first sentence of an utterance is routed as `latency` (its time to first audio is
what the listener waits for). Every later sentence has a deadline instead: the moment a
player that started at the utterance's first audio, playing in real time, reaches it
(``RequestInfo.deadline_s``, seconds from now; admission spends time queued from it).
Arriving earlier than that buys nothing, so such a sentence goes where it costs the fleet
least, and low-latency places stay for first sentences.

- **Where**: a high-throughput worker whose predicted first audio comes before the
  deadline and whose streams keep up with real time (``MeetsDeadline``), the one whose
  streams its step slows least (``delay_to_others``), reason ``deadline_met``;
- else any worker that meets it, leaving the latency reserve on low-latency free
  (``deadline_met``, the pool says which);
- else nobody can meet it: the earliest first audio anywhere up to the hard cap (the gap
  is already coming; make it short), reason ``deadline_missed``.
- **Waits**: ``queued_all_full`` when every worker is at its cap; queued, the deadline
  shrinks with the wait, so it ends on the fastest worker when one frees.
"""

from __future__ import annotations

from gateway.routing.classes import Context, SlaRules
from gateway.routing.filters import WITHIN_CAP, InPool, LeavesLatencyReserve, MeetsDeadline
from gateway.routing.scorers import delay_to_others, predicted_ttfp
from gateway.routing.stages import Plan, Stage
from gateway.types import PoolName, SlaClass, reasons
from gateway.types.codec import FRAMES_PER_SECOND
from gateway.types.curve import audio_seconds_for
from gateway.types.view import RequestInfo

_OFF_LOW_LATENCY = InPool(PoolName.HIGH_THROUGHPUT)


def plan(request: RequestInfo, context: Context) -> Plan:
    assert request.deadline_s is not None
    frames = audio_seconds_for(request.input_chars) * FRAMES_PER_SECOND
    # The worker's first audio must come early enough for the gateway's own share too.
    meets = MeetsDeadline(request.deadline_s - request.gateway_delay_s)
    cheapest = delay_to_others(frames)
    return Plan(
        (
            Stage((_OFF_LOW_LATENCY, WITHIN_CAP, meets), cheapest, reasons.DEADLINE_MET),
            Stage((WITHIN_CAP, LeavesLatencyReserve(context.latency_reserve), meets), cheapest, reasons.DEADLINE_MET),
            Stage((WITHIN_CAP,), predicted_ttfp, reasons.DEADLINE_MISSED, own_time=True),
        ),
        reasons.QUEUED_ALL_FULL,
    )


# Queued, served in its class's turn (the session sends them as `balanced`); never spills or
# is promoted: its deadline already says how urgent it is.
RULES = SlaRules(SlaClass.BALANCED, plan)
