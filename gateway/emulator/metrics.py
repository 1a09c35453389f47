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

Histogram buckets are the released ones (``metrics/definitions.py``: ``SECONDS_BUCKETS``
for latencies, TTFP and audio duration, ``RTF_BUCKETS``, ``SECONDS_FAST_BUCKETS`` for
underruns), so a dashboard's percentiles read the same on real and emulated workers.
``num_requests_running`` counts requests in any stage (``omni_base.py``
``_publish_request_gauges``: dispatched minus waiting in a scheduler), so a request whose
Stage 0 is done but whose last audio is still in Stage 1 is running. With
``--disable-log-stats`` nothing is observed (every ``vllm_omni:`` update is gated on
``log_stats``): the families created with their labels up front read 0, the others and
vLLM's own ``vllm:*`` series are absent.

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

# vllm-omni 0.30.0 metrics/definitions.py
SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
SECONDS_FAST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
RTF_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0, 10.0)


@dataclass(frozen=True)
class EngineCounts:
    running: int  # Stage 0 batch
    waiting: int  # Stage 0 queue
    decoding: int  # requests Stage 1 holds codec state for
    finishing: int = 0  # Stage 0 done, the last audio still in Stage 1

    @property
    def in_pipeline(self) -> int:
        """Requests running in any stage: what vllm_omni:num_requests_running counts."""
        return self.running + self.finishing


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
ABORT_ENGINE_DEAD = "engine_dead"  # serving_speech.py 1776-1777: the engine died mid-stream


class EmulatorMetrics:
    def __init__(
        self,
        model_name: str,
        read_engine: Callable[[], EngineCounts],
        started_at: float | None = None,
        log_stats: bool = True,
    ) -> None:
        self.model_name = model_name
        self.log_stats = log_stats  # False with --disable-log-stats: nothing is observed
        self.registry = CollectorRegistry()
        r = self.registry
        r.register(_StartTime(time.time() if started_at is None else started_at))
        m = ["model_name"]
        a = ["model_name", "stage", "replica"]
        self.e2e_latency = Histogram("vllm_omni:e2e_request_latency_s", "Pipeline-global end-to-end request latency in seconds (user arrival to complete response).", m, buckets=SECONDS_BUCKETS, registry=r)
        self.queue_wait = Histogram("vllm_omni:request_queue_wait_s", "Per-request queue wait between submit arrival and stage submit, in seconds.", m, buckets=SECONDS_BUCKETS, registry=r)
        self.prompt_tokens = Counter("vllm_omni:prompt_tokens", "Total prompt (input) tokens processed across all pipeline stages.", m, registry=r)
        self.generation_tokens = Counter("vllm_omni:generation_tokens", "Total generation (output) tokens produced across all pipeline stages.", m, registry=r)
        # prometheus.py OmniPrometheusMetrics: these children exist from the start (at 0).
        for family in (self.e2e_latency, self.queue_wait, self.prompt_tokens, self.generation_tokens):
            family.labels(model_name)
        self._ttfp = Histogram("vllm_omni:audio_ttfp_s", "Time to first audio packet (streaming)", a, buckets=SECONDS_BUCKETS, registry=r)
        self.rtf = Histogram("vllm_omni:audio_rtf", "Audio real-time factor (stage_gen_time_s / audio_duration_s)", a, buckets=RTF_BUCKETS, registry=r)
        self.audio_duration = Histogram("vllm_omni:audio_duration_s", "Generated audio content duration in seconds (audio_frames / sample_rate)", a, buckets=SECONDS_BUCKETS, registry=r)
        self._underrun = Histogram("vllm_omni:audio_underrun_s", "Worst gap a real-time player would hit", a, buckets=SECONDS_FAST_BUCKETS, registry=r)
        self.success = Counter("vllm_omni:requests_success", "Total requests by completion reason (abort = failed)", [*m, "finished_reason"], registry=r)
        self.failed = Counter("vllm_omni:requests_failed", "Total requests by failure reason", [*m, "reason"], registry=r)
        self.frames = Counter("vllm_omni:audio_frames", "Audio frames (PCM samples) generated", a, registry=r)
        self.stream_completed = Counter("vllm_omni:speech_stream_completed", "Streams completed", m, registry=r)
        self.stream_aborted = Counter("vllm_omni:speech_stream_aborted", "Streams aborted", [*m, "reason"], registry=r)
        self.graph_captures = Counter("higgs_emulator_graph_captures", "Lazy local-MLP graph captures done", ["batch_size"], registry=r)
        self.decode_steps = Counter("higgs_emulator_decode_steps", "Stage 0 steps run, by batch size", ["batch_size"], registry=r)
        r.register(_EngineGauges(model_name, read_engine, log_stats))

    # --- EngineObserver ---------------------------------------------------------------
    def on_steps(self, batch_size: int, steps: int) -> None:
        self.decode_steps.labels(str(batch_size)).inc(steps)

    def on_capture(self, batch_size: int) -> None:
        self.graph_captures.labels(str(batch_size)).inc()

    # --- request outcomes ---------------------------------------------------------------
    def first_audio(self, ttfp: float) -> None:
        if self.log_stats:
            self._ttfp.labels(self.model_name, AUDIO_STAGE, REPLICA).observe(ttfp)

    def underrun(self, seconds: float) -> None:
        if self.log_stats:
            self._underrun.labels(self.model_name, AUDIO_STAGE, REPLICA).observe(seconds)

    def completed(
        self,
        e2e: float,
        queue_wait: float,
        audio_seconds: float,
        samples: int,
        streamed: bool,
        prompt_tokens: int = 0,
        generation_tokens: int = 0,
        finished_reason: str = "stop",
    ) -> None:
        if not self.log_stats:
            return
        name = self.model_name
        self.success.labels(name, finished_reason).inc()
        # omni_base.py: Stage 0's prompt tokens, every stage's output tokens (code2wav's are 0).
        if prompt_tokens > 0:
            self.prompt_tokens.labels(name).inc(prompt_tokens)
        if generation_tokens > 0:
            self.generation_tokens.labels(name).inc(generation_tokens)
        self.e2e_latency.labels(name).observe(e2e)
        self.queue_wait.labels(name).observe(queue_wait)
        audio = (name, AUDIO_STAGE, REPLICA)
        self.audio_duration.labels(*audio).observe(audio_seconds)
        if audio_seconds > 0:
            # The final stage generates from the moment the request is scheduled to its last chunk.
            self.rtf.labels(*audio).observe(max(e2e - queue_wait, 0.0) / audio_seconds)
        if samples > 0:
            self.frames.labels(*audio).inc(samples)
        if streamed:
            self.stream_completed.labels(name).inc()

    def failed_request(self, reason: str) -> None:
        """A request that ended without its audio: ``requests_failed{reason}`` and, as the
        real ``request_failed`` does, ``requests_success{finished_reason="abort"}``."""
        if not self.log_stats:
            return
        self.failed.labels(self.model_name, reason).inc()
        self.success.labels(self.model_name, "abort").inc()

    def aborted_stream(self, reason: str) -> None:
        if self.log_stats:
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

    def __init__(self, model_name: str, read_engine: Callable[[], EngineCounts], log_stats: bool) -> None:
        self._model_name = model_name
        self._read = read_engine
        self._log_stats = log_stats

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        counts = self._read() if self._log_stats else EngineCounts(0, 0, 0)  # never set without stats
        helps = {
            "running": "Number of requests currently running across all pipeline stages.",
            "waiting": "Number of requests waiting to be scheduled.",
        }
        for name, value in (("running", counts.in_pipeline), ("waiting", counts.waiting)):
            family = GaugeMetricFamily(f"vllm_omni:num_requests_{name}", helps[name], labels=["model_name"])
            family.add_metric([self._model_name], value)
            yield family
        if not self._log_stats:
            return  # vLLM creates no stat logger: its vllm:* series are not there
        per_stage = {"running": (counts.running, counts.decoding + counts.finishing), "waiting": (counts.waiting, 0)}
        for name, (stage0, stage1) in per_stage.items():
            family = GaugeMetricFamily(f"vllm:num_requests_{name}", f"Requests {name}, per stage", labels=["model_name", "stage", "replica"])
            family.add_metric([self._model_name, "0", REPLICA], stage0)
            family.add_metric([self._model_name, "1", REPLICA], stage1)
            yield family
