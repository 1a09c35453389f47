"""``GET /metrics`` of an emulated worker: the real worker's series, plus emulator-only ones.

Names and labels follow vllm-omni 0.30.0 (``vllm_omni/metrics/definitions.py``,
``prometheus.py``, ``modality.py``): pipeline series carry ``model_name`` (the positional
model, not ``--served-model-name``), audio series and vLLM's ``vllm:*`` carry
``{model_name, stage, replica}``; ``requests_success_total`` has ``finished_reason`` and
also counts failures (as ``abort``); ``audio_frames`` counts PCM samples; ``audio_rtf`` is
the final stage's generation time over the audio duration. Series only the emulator has
start with ``higgs_emulator_``.
Latencies are measured on the wall clock, i.e. they shrink with ``--time-scale``.
Each worker owns its registry: several emulators can share a process (tests, demo).

``process_start_time_seconds`` is what vLLM's default registry exports through
prometheus_client's process collector (one API server); the gateway reads it to notice
a worker restarted behind the same address. Here it is the emulated worker's own start
(its app's creation), so in-process emulators started one after another differ too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
_TTFP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
_RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 5.0)
_DURATION_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0)


@dataclass(frozen=True)
class EngineCounts:
    running: int  # Stage 0 batch
    waiting: int  # Stage 0 queue
    decoding: int  # requests Stage 1 holds codec state for


# The stage that emits audio (code2wav) and its replica: the audio families' labels.
AUDIO_STAGE = "1"
REPLICA = "0"
# vllm_omni:requests_failed_total{reason}: omni_base.normalize_failure_reason's vocabulary.
FAILED_CLIENT_DISCONNECT = "client_disconnect"
FAILED_STAGE_ERROR = "stage_error"
# vllm_omni:speech_stream_aborted_total{reason}: serving_speech._generate_audio_chunks.
ABORT_CANCELLED = "cancelled"  # the client went away (CancelledError)
ABORT_CLOSED = "closed"  # the response iterator was closed (GeneratorExit)
ABORT_ERROR = "error"  # generation failed mid-stream


class EmulatorMetrics:
    def __init__(self, model_name: str, read_engine: Callable[[], EngineCounts], started_at: float | None = None) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        r = self.registry
        r.register(_StartTime(time.time() if started_at is None else started_at))
        m = ["model_name"]
        a = ["model_name", "stage", "replica"]
        self.e2e_latency = Histogram("vllm_omni:e2e_request_latency_s", "End-to-end request latency", m, buckets=_LATENCY_BUCKETS, registry=r)
        self.queue_wait = Histogram("vllm_omni:request_queue_wait_s", "Time waiting for a Stage 0 slot", m, buckets=_LATENCY_BUCKETS, registry=r)
        self._ttfp = Histogram("vllm_omni:audio_ttfp_s", "Time to first audio packet (streaming)", a, buckets=_TTFP_BUCKETS, registry=r)
        self.rtf = Histogram("vllm_omni:audio_rtf", "Audio real-time factor (stage_gen_time_s / audio_duration_s)", a, buckets=_RTF_BUCKETS, registry=r)
        self.audio_duration = Histogram("vllm_omni:audio_duration_s", "Generated audio content duration in seconds (audio_frames / sample_rate)", a, buckets=_DURATION_BUCKETS, registry=r)
        self._underrun = Histogram("vllm_omni:audio_underrun_s", "Worst gap a real-time player would hit", a, buckets=_TTFP_BUCKETS, registry=r)
        self.success = Counter("vllm_omni:requests_success", "Total requests by completion reason (abort = failed)", [*m, "finished_reason"], registry=r)
        self.failed = Counter("vllm_omni:requests_failed", "Total requests by failure reason", [*m, "reason"], registry=r)
        self.frames = Counter("vllm_omni:audio_frames", "Audio frames (PCM samples) generated", a, registry=r)
        self.stream_completed = Counter("vllm_omni:speech_stream_completed", "Streams completed", m, registry=r)
        self.stream_aborted = Counter("vllm_omni:speech_stream_aborted", "Streams aborted", [*m, "reason"], registry=r)
        self.graph_captures = Counter("higgs_emulator_graph_captures", "Lazy local-MLP graph captures done", ["batch_size"], registry=r)
        self.decode_steps = Counter("higgs_emulator_decode_steps", "Stage 0 steps run, by batch size", ["batch_size"], registry=r)
        r.register(_EngineGauges(model_name, read_engine))

    # --- EngineObserver ---------------------------------------------------------------
    def on_steps(self, batch_size: int, steps: int) -> None:
        self.decode_steps.labels(str(batch_size)).inc(steps)

    def on_capture(self, batch_size: int) -> None:
        self.graph_captures.labels(str(batch_size)).inc()

    # --- request outcomes ---------------------------------------------------------------
    def first_audio(self, ttfp: float) -> None:
        self._ttfp.labels(self.model_name, AUDIO_STAGE, REPLICA).observe(ttfp)

    def underrun(self, seconds: float) -> None:
        self._underrun.labels(self.model_name, AUDIO_STAGE, REPLICA).observe(seconds)

    def completed(
        self, e2e: float, queue_wait: float, audio_seconds: float, samples: int, streamed: bool, finished_reason: str = "stop"
    ) -> None:
        name = self.model_name
        self.success.labels(name, finished_reason).inc()
        self.e2e_latency.labels(name).observe(e2e)
        self.queue_wait.labels(name).observe(queue_wait)
        audio = (name, AUDIO_STAGE, REPLICA)
        self.audio_duration.labels(*audio).observe(audio_seconds)
        if audio_seconds > 0:
            # The final stage generates from the moment the request is scheduled to its last chunk.
            self.rtf.labels(*audio).observe(max(e2e - queue_wait, 0.0) / audio_seconds)
        self.frames.labels(*audio).inc(samples)
        if streamed:
            self.stream_completed.labels(name).inc()

    def failed_request(self, reason: str) -> None:
        """A request that ended without its audio: ``requests_failed{reason}`` and, as the
        real ``request_failed`` does, ``requests_success{finished_reason="abort"}``."""
        self.failed.labels(self.model_name, reason).inc()
        self.success.labels(self.model_name, "abort").inc()

    def aborted_stream(self, reason: str) -> None:
        self.stream_aborted.labels(self.model_name, reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _StartTime(Collector):
    """The process collector's start-time gauge, for this emulated worker."""

    def __init__(self, started_at: float) -> None:
        self._started_at = started_at

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", value=self._started_at
        )


class _EngineGauges(Collector):
    """Queue gauges read from the engine at scrape time, so they are never stale."""

    def __init__(self, model_name: str, read_engine: Callable[[], EngineCounts]) -> None:
        self._model_name = model_name
        self._read = read_engine

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        counts = self._read()
        for name, value in (("running", counts.running), ("waiting", counts.waiting)):
            family = GaugeMetricFamily(f"vllm_omni:num_requests_{name}", f"Requests {name} in Stage 0", labels=["model_name"])
            family.add_metric([self._model_name], value)
            yield family
        per_stage = {"running": (counts.running, counts.decoding), "waiting": (counts.waiting, 0)}
        for name, (stage0, stage1) in per_stage.items():
            family = GaugeMetricFamily(f"vllm:num_requests_{name}", f"Requests {name}, per stage", labels=["model_name", "stage", "replica"])
            family.add_metric([self._model_name, "0", REPLICA], stage0)
            family.add_metric([self._model_name, "1", REPLICA], stage1)
            yield family
