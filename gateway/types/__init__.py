"""The vocabulary every part of the gateway shares; it imports nothing else of ours.

This module holds the names everyone uses (pools, SLA classes, worker states, headers);
its submodules hold the rest of the shared words, each for one subject:

- ``codec``: the workers' audio format (24 kHz s16le mono, 25 codec frames per second);
- ``view`` and ``decision``: what the routing policy sees and what it answers;
- ``curve``: a worker's predicted behaviour by load, carried in the view;
- ``reasons``: every routing and admission reason (header, logs, metric label);
- ``error_kinds``: how a worker call failed and why a request was retried (metric labels);
- ``labels``: the other metric label values producers pass (rejections, disconnects,
  ejections, restarts) and the TTFP bucket bounds configuration checks against;
- ``observations``: what one upstream stream showed, for the performance model.

Every layer may import it; it sits at the bottom of the contract in pyproject.toml.
"""

from __future__ import annotations

from enum import StrEnum


class PoolName(StrEnum):
    """The two worker pools; each runs one vllm-omni deploy profile."""

    LOW_LATENCY = "low_latency"
    HIGH_THROUGHPUT = "high_throughput"


class SlaClass(StrEnum):
    """What the client asked for with the ``x-sla-class`` header (absent = balanced)."""

    LATENCY = "latency"
    BALANCED = "balanced"
    THROUGHPUT = "throughput"


class WorkerState(StrEnum):
    """A worker's place in its life cycle; only ``READY`` workers are routable."""

    STARTING = "starting"  # launched or discovered; not yet answering /health or not warm
    READY = "ready"  # routable unless an operator drained it (``Worker.drained``)
    EJECTED = "ejected"  # consecutive transport failures; half-open probes bring it back
    FAILED = "failed"  # crash loop or start timeout; the supervisor gave up on it
    STOPPED = "stopped"  # removed from the fleet


SLA_CLASS_HEADER = "x-sla-class"
SLA_TTFP_HEADER = "x-sla-ttfp-ms"
POOL_HEADER = "x-gateway-pool"
# Asks for one pool by name; honoured only where routing.allow_pool_pin is on (the demo).
PIN_POOL_HEADER = "x-gateway-pin-pool"
ROUTE_REASON_HEADER = "x-gateway-route-reason"
# What the routing predicted for this placement (adaptive policy only).
PREDICTED_TTFP_HEADER = "x-gateway-predicted-ttfp-ms"
PREDICTED_RTF_HEADER = "x-gateway-predicted-rtf"
DROPPED_REASON_HEADER = "x-gateway-dropped-reason"
REQUEST_ID_HEADER = "x-request-id"
SPEECH_PATH = "/v1/audio/speech"  # the OpenAI speech route, on the gateway and on workers
SPEECH_STREAM_PATH = "/v1/audio/speech/stream"  # the voice-session WebSocket, on the gateway and on workers
