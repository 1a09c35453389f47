"""The vocabulary every part of the gateway shares: pools, SLA classes, worker states."""

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
ROUTE_REASON_HEADER = "x-gateway-route-reason"
# What the routing predicted for this placement (adaptive policy only).
PREDICTED_TTFP_HEADER = "x-gateway-predicted-ttfp-ms"
PREDICTED_RTF_HEADER = "x-gateway-predicted-rtf"
DROPPED_REASON_HEADER = "x-gateway-dropped-reason"
REQUEST_ID_HEADER = "x-request-id"
SPEECH_PATH = "/v1/audio/speech"  # the OpenAI speech route, on the gateway and on workers

# Higgs-Audio V3 decodes 8 codebooks with a delay pattern: the first 8 decode steps of a
# request (its first 8 tokens) make its first audio frame, so a max_new_tokens below 8
# gets no audio at all, only an empty 200 (vllm-omni 0.30.0:
# model_executor/stage_input_processors/higgs_audio_v3.py, talker2code2wav_async_chunk).
MIN_AUDIO_TOKENS = 8

# Workers' audio: 24 kHz mono signed 16-bit little-endian PCM.
SAMPLE_RATE = 24_000
CHANNELS = 1
SAMPLE_WIDTH = 2
BYTES_PER_SECOND = SAMPLE_RATE * CHANNELS * SAMPLE_WIDTH
