"""Metric label values the producers pass, and the TTFP bucket bounds.

Producers (admission, the speech pipeline, the fleet, restart detection) pass these
values; ``gateway.metrics`` declares the series that carry them. Configuration checks SLO
thresholds against ``TTFP_BUCKETS`` without importing the metrics module.
"""

from __future__ import annotations

from enum import StrEnum

from gateway.types import reasons

# Pool label of a request that never reached a pool (rejected, invalid, client left while queued).
NO_POOL = "none"

# Time to first audio byte: 10 ms .. 60 s, dense around the 100 ms - 1 s range where the
# SLA targets live. 0.5 is the latency-class SLO bound the alert rules read (le="0.5").
TTFP_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0,
                1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0)  # fmt: skip


class RejectReason(StrEnum):
    """``higgs_gateway_rejections_total{reason}``: why a request was turned away before a
    worker: admission's rejection reasons, plus the API key's rate limit."""

    QUEUE_FULL = reasons.QUEUE_FULL  # the class's queue is at its size limit (429)
    WAIT_TIMEOUT = reasons.WAIT_TIMEOUT  # waited max_wait_s without a slot (503)
    NO_WORKERS = reasons.NO_WORKERS  # no routable worker in any pool the policy may use (503)
    SHUTTING_DOWN = reasons.SHUTTING_DOWN  # the gateway is stopping (503)
    RATE_LIMITED = "rate_limited"  # the API key's token bucket is empty (429)
    STREAM_LIMITED = "stream_limited"  # the API key has its tier's most concurrent streams (429)


class KeyResult(StrEnum):
    """``higgs_gateway_key_requests_total{result}``: what the API-key check made of a request."""

    ADMITTED = "admitted"  # within every limit of its key's tier
    RATE_LIMITED = "rate_limited"  # over the tier's requests per second (429)
    STREAM_LIMITED = "stream_limited"  # over the tier's concurrent streams (429)
    SESSION_LIMITED = "session_limited"  # over the tier's open voice sessions (429)


class DisconnectPhase(StrEnum):
    """``higgs_gateway_client_disconnects_total{phase}``: where the client left."""

    QUEUED = "queued"  # still waiting in admission
    BEFORE_FIRST_BYTE = "before_first_byte"  # routed, worker not yet answered
    STREAMING = "streaming"  # audio was flowing


class EjectionReason(StrEnum):
    """``higgs_gateway_worker_ejections_total{reason}``: why a worker left the routable set."""

    HEALTH_PROBE = "health_probe"  # consecutive failed /health probes
    REQUEST_FAILURES = "request_failures"  # consecutive transport failures on real traffic
    PROCESS_EXIT = "process_exit"  # a supervised worker's process died
    ENGINE_DEAD = "engine_dead"  # it answered that its engine died (it serves nothing more)
    STOPPED_LISTENING = "stopped_listening"  # it refused a connection right after failing a request
    QUALITY = "quality"  # its sampled audio fell below the quality floor (gateway.quality)


class RestartReason(StrEnum):
    """``higgs_gateway_worker_restarts_total{reason}``: how a worker restart was noticed."""

    PROCESS_EXIT = "process_exit"  # a supervised worker's process exited and is started again
    START_TIME_CHANGED = "start_time_changed"  # its /metrics process_start_time_seconds moved
    VOICES_MISSING = "voices_missing"  # it no longer held a registered voice (list or a request)
    ADDRESS_CHANGED = "address_changed"  # the same identity (pod) came back at another address


class PlanBound(StrEnum):
    """``higgs_gateway_planner_bound_by{pool,objective}``: what fixed a pool's desired count.

    The class objectives say how much load one worker may carry (its operating load); the
    count is the traffic over that. ``max_load`` when the worker's own ``max_num_seqs``
    binds first; ``minimum`` / ``maximum`` when the pool's configured bound overrides it.
    """

    LATENCY_TTFP = "latency_ttfp"
    LATENCY_RTF = "latency_rtf"
    BALANCED_TTFP = "balanced_ttfp"
    BALANCED_RTF = "balanced_rtf"
    THROUGHPUT_TTFP = "throughput_ttfp"
    THROUGHPUT_RTF = "throughput_rtf"
    MAX_LOAD = "max_load"
    MINIMUM = "minimum"
    MAXIMUM = "maximum"


class ProfileChangeResult(StrEnum):
    """``higgs_gateway_profile_changes_total{result}``: how a GPU's profile change ended."""

    COMPLETED = "completed"  # the worker is routable in its new pool
    DRAIN_TIMEOUT = "drain_timeout"  # requests still in flight after the grace: called off, nothing cut
    FAILED = "failed"  # the new worker did not become routable (start-up, warm-up, crash loop)
