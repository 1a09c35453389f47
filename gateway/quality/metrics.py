"""The ``higgs_gateway_quality_*`` series, on the gateway's registry (docs/observability.md)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.quality.score import Score, Verdict
from gateway.quality.transcriber import Transcript

PREFIX = "higgs_gateway_quality_"
# HNR of speech sits well above 0 dB; the CI floor vllm-omni uses is -2 dB, white noise ~-10.
HNR_BUCKETS = (-10.0, -6.0, -4.0, -2.0, 0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 15.0, 20.0)
# Word error rate against the input text: PocketSphinx hears clean speech at a few tenths, noise at 1.
WER_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.5)
# Decode batch (the most requests the worker carried during the clip), bucketed as its graphs are captured.
BATCH_BOUNDS = (1, 2, 4, 8, 16, 32, 64)


def batch_label(load: int) -> str:
    """``1``, ``2``, ``3-4``, ``5-8`` ... ``33-64``, ``65+``: the graph size a batch pads up to."""
    low = 1
    for bound in BATCH_BOUNDS:
        if load <= bound:
            return str(bound) if low == bound else f"{low}-{bound}"
        low = bound + 1
    return f"{BATCH_BOUNDS[-1] + 1}+"


class QualityMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.samples = Counter(
            PREFIX + "samples", "Streams scored for audio quality, by worker, decode batch and verdict.",
            ["pool", "worker", "batch", "verdict"], registry=registry,
        )  # fmt: skip
        self.hnr = Histogram(
            PREFIX + "hnr_db", "Harmonics-to-noise ratio of scored streams (median over voiced frames), dB.",
            ["pool", "worker", "batch"], buckets=HNR_BUCKETS, registry=registry,
        )  # fmt: skip
        self.bad_share = Gauge(
            PREFIX + "bad_share", "Share of the worker's recent scored streams that failed a check (its window).",
            ["pool", "worker"], registry=registry,
        )  # fmt: skip
        self.dropped = Counter(
            PREFIX + "dropped", "Sampled streams not scored because the scorer was busy (its queue full).", registry=registry
        )
        self.probes = Counter(
            PREFIX + "probes", "Probe texts sent to workers whose traffic was too thin to sample, by outcome.",
            ["pool", "worker", "outcome"], registry=registry,
        )  # fmt: skip

        # Word error rate (quality.wer): transcribed streams, the window's mean, drops, the cost.
        self.wer = Histogram(
            PREFIX + "wer", "Word error rate of transcribed streams against their input text (quality.wer).",
            ["pool", "worker"], buckets=WER_BUCKETS, registry=registry,
        )  # fmt: skip
        self.wer_mean = Gauge(
            PREFIX + "wer_mean", "Mean word error rate of the worker's recent transcribed streams (its wer.window).",
            ["pool", "worker"], registry=registry,
        )  # fmt: skip
        self.wer_dropped = Counter(
            PREFIX + "wer_dropped", "Sampled streams not transcribed because the recogniser was busy (max_pending in its hands).",
            registry=registry,
        )  # fmt: skip
        self.wer_audio = Counter(
            PREFIX + "wer_audio_seconds", "Audio transcribed by the recogniser, seconds.", registry=registry
        )
        self.wer_cpu = Counter(
            PREFIX + "wer_cpu_seconds", "CPU time the recogniser's process spent on transcribed streams, seconds.", registry=registry
        )

    def transcribed(self, pool: str, worker: str, transcript: Transcript) -> None:
        if transcript.errors is not None:
            self.wer.labels(pool, worker).observe(transcript.errors.wer)
        self.wer_audio.inc(transcript.audio_s)
        self.wer_cpu.inc(transcript.cpu_s)

    def scored(self, pool: str, worker: str, load: int, score: Score, verdict: Verdict, bad_share: float) -> None:
        batch = batch_label(load)
        self.samples.labels(pool, worker, batch, verdict.value).inc()
        if score.hnr_db is not None:
            self.hnr.labels(pool, worker, batch).observe(score.hnr_db)
        self.bad_share.labels(pool, worker).set(bad_share)
