"""The gateway's whole configuration: one validated document.

Sources, lowest priority first: defaults, the YAML file, ``HIGGS_GATEWAY_*`` environment
variables (nested keys joined by ``__``, e.g. ``HIGGS_GATEWAY_SERVER__PORT=9000``), and
``HIGGS_GATEWAY_ADMIN_TOKEN`` as a shorthand for ``auth.admin_token``. Every model forbids
unknown keys, so a typo fails at start-up with the key's path instead of being ignored.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.worker.profile import deep_merge
from gateway.host_rules import parse_host_rule
from gateway.types import PoolName, SlaClass
from gateway.types.codec import MIN_AUDIO_TOKENS
from gateway.types.records import DEFAULT_TIER as DEFAULT_TIER  # re-exported: configs name it

DEFAULT_MODEL = "bosonai/higgs-audio-v3-tts-4b"
ENV_PREFIX = "HIGGS_GATEWAY_"

# The real worker's launch command; {placeholders} are filled per worker by the supervisor.
VLLM_OMNI_COMMAND: list[str] = [
    "vllm-omni", "serve", "{model}", "--omni", "--trust-remote-code",
    "--deploy-config", "{profile}", "--host", "{host}", "--port", "{port}",
    "--served-model-name", "{served_model_name}",
    "--log-stats", "--enable-server-load-tracking",
]  # fmt: skip


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names every bad key path."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# What /ready asks for: a pool that can serve (degraded allowed), or every pool.
ReadyRequires = Literal["any_pool", "every_pool"]


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # Largest request body accepted: a speech request carrying a 10 MB ref_audio clip as a
    # base64 data: URI is ~13.4 MB; voice uploads are at most 10 MB of audio + form fields.
    # Speech bodies are also capped at what auth.ref_audio_max_bytes needs (docs/security.md).
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=0)
    # CORS stays off unless origins are listed.
    cors_origins: list[str] = Field(default_factory=list)
    # Seconds to let in-flight requests finish on SIGTERM before workers are stopped.
    shutdown_grace_s: float = Field(30.0, ge=0)
    # Idle keep-alive connections are closed after this; clients that pool connections
    # longer than it race the close and see "server disconnected" (keep theirs shorter).
    keepalive_timeout_s: float = Field(5.0, gt=0)
    # Request line + headers larger than this are refused with 431 and the connection closed
    # (the HTTP parser would otherwise buffer a header of any size).
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    # From connecting (or a request's first byte) to the end of its headers; a client that
    # sends nothing or trickles headers is cut off after this (408).
    header_timeout_s: float = Field(10.0, gt=0)
    # A whole request body (JSON, or a voice upload's form) must arrive within this once its
    # headers have (408 after): a stalled or trickled body would otherwise hold its key's
    # stream slot, or an upload's spooled temporary file, indefinitely.
    body_timeout_s: float = Field(60.0, gt=0)
    # Open connections (HTTP and WebSocket) and requests in progress this replica accepts;
    # past it, new requests get a plain 503 from the server. None = unlimited.
    max_connections: int | None = Field(1024, gt=0)
    # GET /playground: a page to type, listen, compare pools and watch the fleet. On in `demo`.
    playground: bool = False
    # /ready answers 200 while any pool has a routable worker (the other serves every
    # class, degraded), or only while every pool has one (the strict meaning).
    ready_requires: ReadyRequires = "any_pool"
    # Gateway processes on this host, one port, each a replica sharing the fleet's state
    # through Redis (more than 1 needs state.backend: redis; docs/deploy.md).
    processes: int = Field(1, ge=1, le=64)


class WarmupConfig(Strict):
    """Requests sent to a fresh worker before it becomes routable (not counted as traffic)."""

    enabled: bool = True
    # Long enough (about 13 s of speech) that no request of a 64-burst, whose budgets are
    # staggered up to max_new_tokens + 126, ends early at the end of its text.
    text: str = (
        "Warming up the speech engine before real traffic arrives, one batch size after another,"
        " so that every graph the worker needs is captured before the first caller is heard."
    )
    # At least MIN_AUDIO_TOKENS: a smaller budget gives no audio, so the warm-up would warm nothing.
    max_new_tokens: int = Field(50, ge=MIN_AUDIO_TOKENS)
    # Concurrent bursts at each size, so lazily captured graphs exist before users come.
    # None = the pool's default: [1] for low-latency, [1, 2, 4, 8, 16, 32, 64] for high-throughput
    # (clipped to the profile's max_num_seqs).
    batch_sizes: list[int] | None = None
    timeout_s: float = Field(600.0, gt=0)


class LaunchConfig(Strict):
    """Workers the gateway starts and supervises itself, one per GPU."""

    gpus: list[str] = Field(min_length=1)  # one worker per entry, as CUDA_VISIBLE_DEVICES
    host: str = "127.0.0.1"
    port_start: int = Field(0, ge=0, le=65535)  # worker i listens on port_start + i; 0 = any free port
    model: str = DEFAULT_MODEL
    served_model_name: str | None = None  # default: the gateway's served model name
    stage_overrides: dict[str, dict[str, Any]] | None = None
    # Extra environment for the workers, by name: they inherit only an allow-list of the
    # gateway's (docs/security.md, "Worker environment"), never HIGGS_GATEWAY_*.
    env: dict[str, str] = Field(default_factory=dict)
    command: list[str] = Field(default_factory=lambda: list(VLLM_OMNI_COMMAND))
    start_timeout_s: float = Field(900.0, gt=0)  # real workers take minutes
    stop_timeout_s: float = Field(30.0, gt=0)  # SIGTERM, then SIGKILL after this
    restart_backoff_initial_s: float = Field(1.0, gt=0)
    restart_backoff_max_s: float = Field(60.0, gt=0)
    crash_loop_restarts: int = Field(5, gt=0)  # this many exits within the window = failed
    crash_loop_window_s: float = Field(300.0, gt=0)
    log_dir: Path | None = None  # default: <data_dir>/logs
    log_max_bytes: int = Field(20 * 1024 * 1024, gt=0)
    log_backups: int = Field(3, ge=0)
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)


    @field_validator("env")
    @classmethod
    def _no_gateway_settings(cls, env: dict[str, str]) -> dict[str, str]:
        # The gateway's own settings hold its secrets (admin token, Redis password).
        leaked = sorted(name for name in env if name.startswith("HIGGS_GATEWAY_"))
        if leaked:
            raise ValueError(f"HIGGS_GATEWAY_* settings are the gateway's, never a worker's: {', '.join(leaked)}")
        return env


class ProfileChangeConfig(Strict):
    """Moving a supervised GPU from one pool's deploy profile to the other's when the
    desired mix (the planner's) has differed from the running one for long (docs/supervisor.md)."""

    enabled: bool = False
    # The same move must be wanted this long, without a break, before it starts: a real
    # worker needs minutes to come back, so a short swing of the traffic must not pay that.
    hold_s: float = Field(600.0, gt=0)
    # How often the desired mix is read.
    interval_s: float = Field(5.0, gt=0)
    # In-flight requests of the worker being moved get this long to finish; after it the
    # move is called off (the worker takes traffic again) rather than cut a request.
    drain_grace_s: float = Field(120.0, gt=0)
    # The restarted worker must be routable in its new pool within this (start-up and
    # warm-up). None: the target pool's launch.start_timeout_s + launch.warmup.timeout_s.
    ready_timeout_s: float | None = Field(None, gt=0)
    # Supervised workers a pool never drops below, whatever the desired mix says.
    min_workers: dict[PoolName, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)


class SupervisorConfig(Strict):
    """What the supervisor does across pools (each pool's own workers: ``pools.<pool>.launch``)."""

    profile_changes: ProfileChangeConfig = Field(default_factory=ProfileChangeConfig)


class DiscoveryConfig(Strict):
    """How a pool finds workers that run elsewhere."""

    mode: Literal["static", "dns", "kubernetes"] = "static"
    # dns: every address behind a (headless Service) name, re-resolved every interval_s.
    dns_name: str | None = None
    port: int = Field(8091, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    interval_s: float = Field(10.0, gt=0)
    # kubernetes: EndpointSlices of a Service, or pods matching a label selector. Workers
    # are identified by pod name, so one that comes back at a new address keeps its series.
    namespace: str = "default"
    service: str | None = None
    label_selector: str | None = None
    # kubernetes: the port to use by name (an EndpointSlice port / container port name).
    # Unset: each EndpointSlice's own port (its only one, or `port` among several); pods: `port`.
    port_name: str | None = None
    # kubernetes: the API server ends each watch after this long; the pool is then re-listed.
    watch_timeout_s: float = Field(300.0, gt=0)

    @model_validator(mode="after")
    def _mode_needs(self) -> DiscoveryConfig:
        # Fail at start-up, not as a pool that silently never finds a worker.
        if self.mode == "dns" and not self.dns_name:
            raise ValueError("discovery mode dns needs dns_name")
        if self.mode == "kubernetes" and (self.service is None) == (self.label_selector is None):
            raise ValueError("discovery mode kubernetes needs exactly one of service, label_selector")
        return self


class PoolConfig(Strict):
    profile: str  # deploy YAML (path or bare name in profiles/)
    workers: list[str] = Field(default_factory=list)  # static base URLs
    launch: LaunchConfig | None = None
    discovery: DiscoveryConfig = Field(default_factory=DiscoveryConfig)
    # None = the profile's max_num_seqs (gateway/pools/specs.py, default_slots).
    slots_per_worker: int | None = Field(None, gt=0)
    # Warm-up of workers this pool does not launch. None = the defaults for discovered
    # workers and none for static URLs (their operator warms them); supervised workers
    # use launch.warmup.
    warmup: WarmupConfig | None = None

    @model_validator(mode="after")
    def _one_source(self) -> PoolConfig:
        sources = [bool(self.workers), self.launch is not None, self.discovery.mode != "static"]
        if sum(sources) > 1:
            raise ValueError("give workers (static URLs), launch, or a non-static discovery: only one")
        return self


class PoolsConfig(Strict):
    low_latency: PoolConfig = Field(
        default_factory=lambda: PoolConfig(profile="higgs_multimodal_qwen3_low_latency.yaml")
    )
    high_throughput: PoolConfig = Field(
        default_factory=lambda: PoolConfig(profile="higgs_multimodal_qwen3_high_throughput.yaml")
    )

    def get(self, name: PoolName) -> PoolConfig:
        return getattr(self, name.value)

    def items(self) -> list[tuple[PoolName, PoolConfig]]:
        return [(name, self.get(name)) for name in PoolName]


PolicyName = Literal["adaptive", "rules", "low_latency_only", "high_throughput_only", "round_robin", "least_loaded"]


class RoutingThresholds(Strict):
    """Every knob of the routing policies; changeable at run time through the admin API."""

    # --- adaptive (predictions; docs/routing.md) ---------------------------------------
    # RTF a `latency` stream may run at. None = 1.4 x the fleet's best idle RTF (its
    # low-latency workers at load 1), which follows the learned curves on any GPU.
    latency_rtf_ceiling: float | None = Field(None, gt=0)
    # `balanced` requests go where every stream stays at or under this RTF (real time with
    # a margin); past it they queue.
    balanced_rtf_ceiling: float = Field(0.9, gt=0)
    # `throughput` requests may push a worker to this RTF; None = up to max_num_seqs.
    throughput_rtf_ceiling: float | None = Field(None, gt=0)
    # --- every policy ----------------------------------------------------------------
    # Hard caps per worker by pool, overriding pools.<pool>.slots_per_worker at run time.
    # null removes a cap set earlier (a patch deep-merges into the overrides).
    max_per_worker: dict[PoolName, Annotated[int, Field(ge=1)] | None] = Field(default_factory=dict)
    # Requests per low-latency worker that `balanced` and `throughput` (rules: `throughput`)
    # must leave room for, so a `latency` request arriving in a burst is placed at once.
    # adaptive: the most it may be (see adaptive_latency_reserve).
    reserve_for_latency: int = Field(3, ge=0)
    # adaptive: size the reserve from the `latency` traffic seen lately (its p99 of requests
    # in flight at once, up to reserve_for_latency; none while no `latency` request comes).
    # false pins it at reserve_for_latency.
    adaptive_latency_reserve: bool = True
    # How long a `latency` request may wait for a low-latency slot before spilling, when it
    # sends no x-sla-ttfp-ms budget.
    latency_queue_budget_ms: float = Field(150.0, ge=0)
    # Part of an x-sla-ttfp-ms budget that may be spent queueing (the rest is the worker's TTFP).
    ttfp_budget_queue_fraction: float = Field(0.5, ge=0, le=1)
    # adaptive: a request with a reference clip (an uploaded voice, ref_audio) prefers a
    # worker that probably holds its encoded codes (voice affinity): it skips the clip's
    # encode. false: no preference.
    voice_affinity: bool = True
    # What that encode costs a worker without the codes, added to its predicted time by the
    # classes that score the request's own time (latency, balanced, pinned; the others
    # prefer a warm worker only among ties): this many ms per second of the clip, on the
    # hardware the curves are calibrated for (H200; the released worker's encode)...
    voice_affinity_encode_ms_per_second: float = Field(6.0, ge=0)
    # ...or this much for a clip whose length the gateway does not know (a ref_audio URL).
    voice_affinity_bonus_ms: float = Field(40.0, ge=0)

    # --- rules (the first build's threshold policy, kept as a baseline) ---------------
    # Fleet-wide live concurrency at which `balanced` leaves the low-latency pool.
    # None = the low-latency pool's capacity (its routable workers x slots_per_worker).
    balanced_threshold: int | None = Field(None, ge=0)
    # Once over the threshold, `balanced` returns to low-latency only below threshold - hysteresis.
    balanced_hysteresis: int = Field(2, ge=0)


class LearningSettings(Strict):
    """How the adaptive policy's per-worker curves learn and forget (docs/routing.md)."""

    enabled: bool = True
    # Weights halve after this long without new samples at a load: the curve drifts back
    # to the prior when the past stops being representative.
    half_life_s: float = Field(600.0, gt=0)
    # Samples a load needs before it trusts itself over its neighbours and the worker's
    # overall correction (and the overall correction over the prior).
    prior_strength: float = Field(3.0, gt=0)
    # A sample more than this factor off the prior is not a measurement of the worker.
    max_ratio: float = Field(8.0, gt=1)
    # Once a load has prior_strength samples, one sample moves it at most this far (log).
    clamp: float = Field(0.5, gt=0)
    # Neighbouring loads share evidence with weight 0.5 ** distance, up to this distance.
    neighbourhood: int = Field(3, ge=0, le=16)


class MeasuredCurve(Strict):
    """One pool's curve as ``higgs-gateway tune`` measured it, by per-worker concurrency."""

    # Decode real-time factor of a stream (end-to-end RTF less the TTFP's share).
    rtf: dict[Annotated[int, Field(ge=1)], Annotated[float, Field(gt=0)]] = Field(min_length=1)
    # Median time to first packet, seconds.
    ttfp_s: dict[Annotated[int, Field(ge=1)], Annotated[float, Field(gt=0)]] = Field(min_length=1)


class RoutingConfig(Strict):
    policy: PolicyName = "adaptive"
    thresholds: RoutingThresholds = Field(default_factory=RoutingThresholds)
    learning: LearningSettings = Field(default_factory=LearningSettings)
    # Curves `tune` measured per pool: the adaptive policy's prior for those pools instead
    # of the deploy profile's estimate (its shape still fills loads that were not measured).
    measured: dict[PoolName, MeasuredCurve] = Field(default_factory=dict)
    # Honour x-gateway-pin-pool (a request routed inside the pool it names, whatever its
    # class): the demo's Compare plays both profiles with it. Off: such a request is a 400.
    allow_pool_pin: bool = False


DEFAULT_QUEUE_SIZE: dict[str, int] = {"latency": 64, "balanced": 256, "throughput": 512}
DEFAULT_MAX_WAIT_S: dict[str, float] = {"latency": 2.0, "balanced": 30.0, "throughput": 120.0}


class AdmissionConfig(Strict):
    """Bounded per-class queues in front of the pools."""

    # Per SLA class; a class left out keeps its default.
    queue_size: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_QUEUE_SIZE))
    max_wait_s: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_MAX_WAIT_S))
    # A queued throughput request older than this is served (and placed) like a balanced
    # one: no starvation. Short, because a batch burst on 1 LL + 1 HT otherwise waits for
    # high-throughput alone (bursty trace: `throughput` TTFP p99 2.8 s at 5 s, 0.97 s at 0.5 s).
    promote_after_s: float = Field(0.5, ge=0)
    retry_after_s: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _per_class(self) -> AdmissionConfig:
        problems = []
        for key, table in (("queue_size", self.queue_size), ("max_wait_s", self.max_wait_s)):
            for name, value in table.items():
                if name not in DEFAULT_QUEUE_SIZE:
                    problems.append(f"{key}.{name}: not an SLA class ({', '.join(DEFAULT_QUEUE_SIZE)})")
                elif value < 0:
                    problems.append(f"{key}.{name}: must be >= 0")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def queue_limit(self, sla_class: str) -> int:
        return self.queue_size.get(sla_class, DEFAULT_QUEUE_SIZE[sla_class])

    def max_wait(self, sla_class: str) -> float:
        return self.max_wait_s.get(sla_class, DEFAULT_MAX_WAIT_S[sla_class])


class UpstreamConfig(Strict):
    """The relay to workers."""

    transport: Literal["http1", "aiohttp", "httpx"] = "http1"
    max_connections: int = Field(1024, gt=0)  # >= every request admission can let through
    connect_timeout_s: float = Field(2.0, gt=0)
    # Until the worker's first byte; a real cold worker can take seconds, a hung one forever.
    first_byte_timeout_s: float = Field(30.0, gt=0)
    # Longest silence between two chunks once audio flows.
    read_timeout_s: float = Field(30.0, gt=0)
    # Retries on another worker when a worker fails before the first byte.
    retries: int = Field(1, ge=0)


class HealthConfig(Strict):
    interval_s: float = Field(2.0, gt=0)
    jitter: float = Field(0.2, ge=0, le=1)  # +-20% so probes of many workers do not align
    timeout_s: float = Field(2.0, gt=0)
    eject_after_failures: int = Field(3, gt=0)  # consecutive transport failures
    half_open_after_s: float = Field(5.0, gt=0)  # an ejected worker gets one probe after this
    # After each good probe, read the worker's /metrics process_start_time_seconds (or,
    # without it, its voice list) to notice a process replaced behind the same address.
    detect_restarts: bool = True


class WerConfig(Strict):
    """A word error rate against the input text (the ``recogniser`` extra; docs/quality.md)."""

    # Off by default: recognition costs about a CPU second per second of audio, in a child process.
    enabled: bool = False
    # Share of the streams the signal checks score (quality.sample_share) that are also transcribed,
    # per worker (the first scored stream of each worker always is). Probe clips always are.
    sample_share: float = Field(0.02, ge=0, le=1)
    # Clips in the recogniser's hands (the one being decoded included); more are dropped, counted.
    max_pending: int = Field(4, gt=0)
    # Out of routing (reason quality) when the mean WER of a worker's last `window` transcribed
    # streams exceeds this (WER can pass 1.0: insertions count). None: measured, never ejected.
    max_wer: float | None = Field(None, gt=0)
    window: int = Field(8, gt=0)


class QualityConfig(Strict):
    """Audio quality sampling per worker (gateway.quality, docs/quality.md)."""

    enabled: bool = True
    # Share of completed streams scored, per worker (1.0 with max_per_s 0: every one); off the request path.
    sample_share: float = Field(0.1, ge=0, le=1)
    # ...and at most this many a second per worker (0: no cap): under hundreds of streams a
    # second, a share would score dozens of clips on the event loop's core.
    max_per_s: float = Field(1.0, ge=0)
    # Clips shorter than this say little (and probes are longer); only the first max_seconds are scored.
    min_seconds: float = Field(0.5, ge=0)
    max_seconds: float = Field(20.0, gt=0)
    # Clips waiting for the scoring thread; more are dropped (counted), never waited for.
    max_pending: int = Field(32, gt=0)
    # The floors (gateway.quality.score): HNR as vllm-omni's CI bar, full-scale and silent shares, voiced level.
    hnr_floor_db: float = -2.0
    max_clipped_share: float = Field(0.01, ge=0, le=1)
    max_silent_share: float = Field(0.9, ge=0, le=1)
    min_level_dbfs: float = -40.0
    max_level_dbfs: float = Field(-3.0, le=0)
    # Out of routing (reason quality) when eject_after_bad of the last window scored streams failed.
    window: int = Field(8, gt=0)
    eject_after_bad: int = Field(3, gt=0)
    # A probe text for a ready worker with nothing scored for this long (0: no probes).
    probe_interval_s: float = Field(300.0, ge=0)
    probe_text: str = "The quick brown fox jumps over the lazy dog, and then it runs back home again."
    # A word error rate of a share of the scored streams (the recogniser extra; off by default).
    wer: WerConfig = Field(default_factory=WerConfig)

    @model_validator(mode="after")
    def _coherent(self) -> QualityConfig:
        if self.eject_after_bad > self.window:
            raise ValueError(f"quality.eject_after_bad ({self.eject_after_bad}) cannot exceed quality.window ({self.window})")
        if self.min_level_dbfs >= self.max_level_dbfs:
            raise ValueError("quality.min_level_dbfs must be below quality.max_level_dbfs")
        return self


class LoadReportConfig(Strict):
    """Polling each worker's /load and /metrics for load other gateway replicas put on it."""

    enabled: bool = True
    interval_s: float = Field(1.0, gt=0)
    stale_after_s: float = Field(3.0, gt=0)


class ModelsConfig(Strict):
    served_model_name: str = DEFAULT_MODEL
    aliases: list[str] = Field(
        default_factory=lambda: ["tts-1", "tts-1-hd", "gpt-4o-mini-tts", "higgs-audio-v3", "higgs-audio-v3-tts"]
    )
    # Model names for which ``stream: true`` (no ``stream_format``) means a raw audio stream,
    # as on Boson's hosted API (its LiveKit plugin's default model), instead of the
    # worker's SSE. docs/clients.md.
    raw_stream_models: list[str] = Field(default_factory=lambda: ["higgs-audio-v3-tts"])


OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova",
    "sage", "shimmer", "verse", "marin", "cedar",
)  # fmt: skip


class VoicesConfig(Strict):
    # OpenAI voice name -> registered voice name; a name not listed, or mapped to null,
    # gets the model's default voice.
    aliases: dict[str, str | None] = Field(default_factory=dict)
    openai_voices: list[str] = Field(default_factory=lambda: list(OPENAI_VOICES))
    max_upload_bytes: int = Field(10 * 1024 * 1024, gt=0)
    # Higgs clones from 1-30 s of reference audio, and a vllm-omni worker refuses samples
    # outside it; checked at upload so a bad sample fails once, clearly, before it is stored.
    min_duration_s: float = Field(1.0, ge=1.0)
    max_duration_s: float = Field(30.0, gt=0, le=30.0)
    # Voices registered at most: every voice goes to every worker, and a worker holds at
    # most SPEAKER_MAX_UPLOADED of them (1000 unless its operator raised it).
    max_voices: int = Field(1000, gt=0)
    # On replay, delete voices a worker holds that the registry does not (deleted while
    # the worker was down). Turn off only if something besides this gateway uploads voices.
    replay_prune: bool = True
    # Per-request timeout for voice uploads/deletes/listings sent to one worker.
    worker_timeout_s: float = Field(30.0, gt=0)
    # Uploads to a worker that is streaming go one at a time, this far apart: the worker
    # saves a clip on its event loop, pausing its streams (docs/voices.md). 0: all at once.
    upload_spacing_ms: float = Field(200.0, ge=0)

    @model_validator(mode="after")
    def _duration_range(self) -> VoicesConfig:
        if self.min_duration_s > self.max_duration_s:
            raise ValueError("min_duration_s must not exceed max_duration_s")
        return self


# Key and tier names become metric label values and log fields: short and plain.
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


def _sha256_hex(digest: str) -> str:
    # A pasted raw key or a truncated digest would otherwise never match, silently.
    normalized = digest.strip().lower()
    if len(normalized) != 64 or any(c not in "0123456789abcdef" for c in normalized):
        raise ValueError("each entry must be a sha256 hex digest (64 hex characters) of a key")
    return normalized


class TierConfig(Strict):
    """What every key of one tier may do (docs/security.md, "Tiers")."""

    # Requests per second per key (token bucket); 0 = unlimited.
    rate_limit_rps: float = Field(0.0, ge=0)
    rate_limit_burst: int = Field(20, gt=0)
    # Speech requests one key may have in flight (queued or streaming); None = unlimited.
    max_concurrent_streams: int | None = Field(None, gt=0)
    # Open voice sessions (WebSocket /v1/audio/speech/stream) per key; None = unlimited.
    max_sessions: int | None = Field(None, gt=0)
    # Voices one key may have registered (its own; voices.max_voices bounds them all); None = no
    # per-key quota.
    max_voices: int | None = Field(None, gt=0)


class ApiKeyConfig(Strict):
    """One named API key: its digest, a name for logs and metrics (never the key), its tier."""

    name: str = Field(pattern=LABEL_PATTERN)
    sha256: str
    tier: str = DEFAULT_TIER

    @field_validator("sha256")
    @classmethod
    def _hex_digest(cls, digest: str) -> str:
        return _sha256_hex(digest)


MIN_ADMIN_TOKEN_CHARS = 16


class AuthConfig(Strict):
    # sha256 hex digests of accepted API keys, unnamed, in the default tier; empty (and no
    # `keys`) = /v1 open.
    api_key_sha256: list[str] = Field(default_factory=list)
    # Named keys, each in a tier; named keys can be counted one by one (per_key_metrics).
    keys: list[ApiKeyConfig] = Field(default_factory=list)
    # Named tiers of limits. `default` (unnamed keys, and named ones without a tier) takes
    # rate_limit_rps / rate_limit_burst below unless it is defined here.
    tiers: dict[str, TierConfig] = Field(default_factory=dict)
    # The default tier's requests per second per key (token bucket); 0 = unlimited.
    rate_limit_rps: float = Field(0.0, ge=0)
    rate_limit_burst: int = Field(20, gt=0)
    # Usage series per key (labelled by its configured name) as well as per tier. Off: one
    # series per tier, however many keys there are.
    per_key_metrics: bool = False
    admin_token: SecretStr | None = None  # admin routes are off without one; >= 16 characters
    # No API keys on an address other than loopback is refused at start-up unless this says
    # so: an open /v1 (and its GPUs) on a network must be a choice, not a default.
    allow_anonymous: bool = False
    # GET /v1/models, /v1/audio/models and /v1/audio/voices without an API key: Open WebUI
    # fetches them without its Authorization header.
    open_listings: bool = False
    # ref_audio URLs are refused unless their host is listed (data: URIs are always fine).
    # Entries: "host" (any port), "host:port", "*.domain" (subdomains only), IP literals.
    ref_audio_url_hosts: list[str] = Field(default_factory=list)
    # Largest decoded ref_audio data: URI.
    ref_audio_max_bytes: int = Field(10 * 1024 * 1024, gt=0)

    @field_validator("api_key_sha256")
    @classmethod
    def _hex_digests(cls, digests: list[str]) -> list[str]:
        return [_sha256_hex(digest) for digest in digests]

    @field_validator("admin_token")
    @classmethod
    def _long_admin_token(cls, token: SecretStr | None) -> SecretStr | None:
        # A short token can be guessed online, and it unlocks routing, drains and every voice.
        value = "" if token is None else token.get_secret_value()
        if value and len(value) < MIN_ADMIN_TOKEN_CHARS:
            raise ValueError(
                f"the admin token must be at least {MIN_ADMIN_TOKEN_CHARS} characters (this one has {len(value)}); "
                "`higgs-gateway keys new` makes a suitable one"
            )
        return token

    @field_validator("ref_audio_url_hosts")
    @classmethod
    def _host_entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            parse_host_rule(entry)  # ValueError names the bad entry
        return entries

    @model_validator(mode="after")
    def _keys_and_tiers(self) -> AuthConfig:
        problems = [f"tiers.{name}: not a valid tier name" for name in self.tiers if not re.match(LABEL_PATTERN, name)]
        if DEFAULT_TIER in self.tiers and self.model_fields_set & {"rate_limit_rps", "rate_limit_burst"}:
            problems.append("set the default tier's limits in tiers.default or rate_limit_rps/rate_limit_burst, not both")
        known = {DEFAULT_TIER, *self.tiers}
        names: set[str] = set()
        digests = set(self.api_key_sha256)
        if len(digests) < len(self.api_key_sha256):
            problems.append("api_key_sha256: the same digest is listed twice")
        for index, key in enumerate(self.keys):
            if key.tier not in known:
                problems.append(f"keys.{index}.tier: no tier {key.tier!r} (known: {', '.join(sorted(known))})")
            if key.name in names:
                problems.append(f"keys.{index}.name: {key.name!r} is used by another key")
            if key.sha256 in digests:
                problems.append(f"keys.{index}.sha256: the same key is configured twice")
            names.add(key.name)
            digests.add(key.sha256)
        # A key's voices are owned by its key id (the digest's first 12 characters): two keys
        # sharing one would share their voices.
        if len({digest[:12] for digest in digests}) < len(digests):
            problems.append("two keys' sha256 digests start with the same 12 characters (their key id); replace one")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def keys_configured(self) -> bool:
        return bool(self.api_key_sha256 or self.keys)

    def tier(self, name: str) -> TierConfig:
        """A tier's limits (``default``: from rate_limit_rps / rate_limit_burst unless defined)."""
        configured = self.tiers.get(name)
        if configured is not None:
            return configured
        return TierConfig(rate_limit_rps=self.rate_limit_rps, rate_limit_burst=self.rate_limit_burst)

    def tier_names(self) -> list[str]:
        return [DEFAULT_TIER, *(name for name in self.tiers if name != DEFAULT_TIER)]


class StateConfig(Strict):
    """Where state every gateway replica must agree on lives (docs/deploy.md, "State backends").

    ``local``: the data directory (one gateway, or replicas sharing one volume). ``redis``:
    routing overrides, drains, voices and per-key rate limits in one Redis; the data
    directory then holds only this replica's cache of them.
    """

    backend: Literal["local", "redis"] = "local"
    # redis://[:password@]host:6379/0, or rediss:// for TLS. A secret: shown masked.
    redis_url: SecretStr | None = None
    # The password kept out of the URL: from the environment
    # (HIGGS_GATEWAY_STATE__REDIS_PASSWORD) or from a file such as a mounted Secret, read
    # on each new connection. At most one of the three places holds it.
    redis_password: SecretStr | None = None
    redis_password_file: Path | None = None
    # Prepended to every key and channel, so several gateways can share one Redis.
    key_prefix: str = Field("higgs-gateway:", max_length=100)
    # Redis unreachable or slow: "open" lets keyed requests through, "closed" answers 503
    # (rate limits and concurrent-stream limits alike).
    rate_limit_failure_mode: Literal["open", "closed"] = "open"
    # Redis' maxmemory in MiB, for `serve --check` to size voices against (max_voices x
    # max_upload_bytes); unset: read from Redis when it answers.
    redis_maxmemory_mb: int | None = Field(None, gt=0)
    # A stream's fleet-wide slot is a lease renewed every third of this while it runs; a
    # replica that dies mid-stream frees its slots after at most this long.
    stream_lease_ttl_s: float = Field(30.0, ge=1, le=3600)
    # Longest wait for one Redis call; a slower answer counts as Redis being unavailable.
    timeout_s: float = Field(0.5, gt=0, le=30)
    # With Redis: every replica's leases on every worker shared in real time, so replicas
    # route as one (docs/routing.md, "Many replicas"). Off: each replica counts its own
    # leases plus the workers' reports, as one replica does.
    share_inflight: bool = True
    # A replica's leases are renewed every third of this; a replica that dies leaves no
    # load behind after at most this plus one renewal interval.
    inflight_lease_ttl_s: float = Field(3.0, ge=1, le=60)
    # Longest a request waits for its fleet-wide slot's answer; slower, and it goes on with
    # this replica's decision while the answer, still awaited up to timeout_s, updates the
    # view. Only a failing Redis, or one silent for timeout_s, turns routing to this
    # replica's own view until the next renewal succeeds.
    inflight_timeout_s: float = Field(0.1, gt=0, le=5)
    # Full re-read of the shared state (the safety net under pub/sub change messages).
    resync_interval_s: float = Field(5.0, gt=0)
    # Reconnect back-off: doubles from 0.1 s up to this.
    reconnect_max_backoff_s: float = Field(5.0, gt=0)
    # Verify the server's TLS certificate (rediss://); a private CA goes in tls_ca_file.
    tls_verify: bool = True
    tls_ca_file: Path | None = None

    @field_validator("redis_password_file")
    @classmethod
    def _readable(cls, path: Path | None) -> Path | None:
        # Checked at start-up for a clear message; read again on every connection.
        if path is not None:
            try:
                path.read_bytes()
            except OSError as exc:
                raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
        return path

    @model_validator(mode="after")
    def _redis_needs_url(self) -> StateConfig:
        if self.backend == "redis":
            if self.redis_url is None:
                raise ValueError("state.redis_url is required when state.backend is redis")
            scheme = self.redis_url.get_secret_value().split("://", 1)[0].lower()
            if scheme not in ("redis", "rediss", "unix"):
                raise ValueError("state.redis_url must start with redis://, rediss:// or unix://")
        places = [
            name
            for name, given in (
                ("the password in state.redis_url", self.redis_url is not None and _url_has_password(self.redis_url)),
                ("state.redis_password", self.redis_password is not None),
                ("state.redis_password_file", self.redis_password_file is not None),
            )
            if given
        ]
        if len(places) > 1:
            raise ValueError(f"give the Redis password in one place only, not in {' and '.join(places)}")
        return self


def _url_has_password(url: SecretStr) -> bool:
    parts = urlsplit(url.get_secret_value())
    return bool(parts.password) or "password" in parse_qs(parts.query)


class SloConfig(Strict):
    """The targets the alert rules and dashboards are generated from
    (``python dashboards/generate.py --config FILE``); the gateway itself only echoes them."""

    # Latency class: this share of requests gets its first audio within the target.
    # The target must be a bucket bound of higgs_gateway_ttfp_seconds (the alert reads le=).
    latency_ttfp_target_s: float = 0.5
    latency_ttfp_objective: float = Field(0.99, gt=0, lt=1)
    # HiggsGatewayDegraded fires after serving this long with a pool empty.
    degraded_alert_after_s: int = Field(300, gt=0)

    @field_validator("latency_ttfp_target_s")
    @classmethod
    def _bucket_bound(cls, value: float) -> float:
        from gateway.types.labels import TTFP_BUCKETS  # the one list of bucket bounds

        if value not in TTFP_BUCKETS:
            raise ValueError(f"must be a TTFP histogram bucket bound: one of {', '.join(map(str, TTFP_BUCKETS))}")
        return value


class ObjectiveConfig(Strict):
    """What one SLA class must get: every stream at or under ``rtf`` (real time is 1.0) and,
    when set, its first audio within ``ttfp_s``."""

    ttfp_s: float | None = Field(None, gt=0)
    rtf: float = Field(gt=0)


class PoolBoundsConfig(Strict):
    """How few and how many workers of one pool the planner may ask for."""

    min: int = Field(0, ge=0)
    max: int = Field(16, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> PoolBoundsConfig:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        return self


def _default_objectives() -> dict[SlaClass, ObjectiveConfig]:
    return {
        SlaClass.LATENCY: ObjectiveConfig(ttfp_s=0.5, rtf=0.5),
        SlaClass.BALANCED: ObjectiveConfig(ttfp_s=2.0, rtf=0.9),
        SlaClass.THROUGHPUT: ObjectiveConfig(rtf=1.0),
    }


class PlannerConfig(Strict):
    """The fleet planner (docs/planner.md): how many workers of each pool the traffic needs."""

    enabled: bool = True
    # How often the desired mix is recomputed (in the background, never on a request).
    interval_s: float = Field(5.0, gt=0)
    # Arrival rates and lengths are averaged over about this long (exponential decay).
    smoothing_s: float = Field(300.0, gt=0)
    # Size for the rate forecast this far ahead (the smoothed rate's trend; docs/planner.md):
    # set it to how long a new worker takes to serve. 0: the smoothed rate as it is.
    forecast_s: float = Field(0.0, ge=0)
    # Fewer requests than this in the smoothing window: too thin to judge, nothing changes.
    min_requests: float = Field(20.0, ge=1)
    # Plan each worker to carry at most this share of the load its objectives allow: the
    # rest absorbs the bursts an average hides.
    target_utilisation: float = Field(0.8, gt=0, le=1)
    # `latency` is planned on low-latency workers only, as the routing places it (a mix
    # without one cannot carry `latency`); true lets the plan put it on high-throughput
    # workers too when their RTF meets its objective.
    latency_on_high_throughput: bool = False
    # Per class; a class left out keeps its default.
    objectives: dict[SlaClass, ObjectiveConfig] = Field(default_factory=_default_objectives)
    # Per pool; a pool left out keeps the defaults (min 0, max 16).
    pools: dict[PoolName, PoolBoundsConfig] = Field(default_factory=lambda: {pool: PoolBoundsConfig() for pool in PoolName})

    @field_validator("objectives")
    @classmethod
    def _every_class(cls, objectives: dict[SlaClass, ObjectiveConfig]) -> dict[SlaClass, ObjectiveConfig]:
        return {**_default_objectives(), **objectives}

    @field_validator("pools")
    @classmethod
    def _every_pool(cls, pools: dict[PoolName, PoolBoundsConfig]) -> dict[PoolName, PoolBoundsConfig]:
        return {**{pool: PoolBoundsConfig() for pool in PoolName}, **pools}

    def bounds(self, pool: PoolName) -> PoolBoundsConfig:
        return self.pools[pool]


class LoggingConfig(Strict):
    level: str = "INFO"
    # json: one JSON object per line (for log shippers); text: short human lines;
    # auto: text when stderr is a terminal, else json. `demo` defaults to auto.
    format: Literal["json", "text", "auto"] = "json"
    access_log: bool = True
    log_input_text: bool = False


class SessionsConfig(Strict):
    """Voice sessions on ``/v1/audio/speech/stream`` (docs/sessions.md)."""

    # The released worker's fixed timers: the first session.config, then silence between
    # messages (not counted while the session still has audio to deliver).
    config_timeout_s: float = Field(10.0, gt=0)
    idle_timeout_s: float = Field(30.0, gt=0)
    # Text received and not yet sent to a worker (waiting to be cut, or cut and queued; the
    # worker has no cap); an input.text that would pass it is refused and dropped.
    max_buffered_chars: int = Field(16384, ge=1)
    # Sentences cut and not yet sent to a worker; an input.text that would pass it is refused.
    max_queued_sentences: int = Field(256, ge=1)
    # Seconds of audio a session asks the workers for ahead of a real-time player of what it
    # sent: a sentence is requested once the player will reach it within this, and the audio a
    # session holds (received, not yet sent) is capped at as much.
    lookahead_s: float = Field(10.0, gt=0)
    # A send to the client that waits this long (it stopped reading) ends the session (1008)
    # and frees its slots; while a send waits, no sentence is requested.
    send_timeout_s: float = Field(10.0, gt=0)
    # The longest a session may last; then it is ended (1008, "maximum session duration reached").
    max_duration_s: float = Field(3600.0, gt=0)
    # Sessions this replica serves at once (every key together; per key it is
    # auth.tiers.*.max_sessions); None = unlimited.
    max_open_per_replica: int | None = Field(None, gt=0)


OtlpProtocol = Literal["http/protobuf", "grpc"]


class TracingConfig(Strict):
    """OpenTelemetry spans per speech request, exported over OTLP (docs/observability.md).

    Off while ``endpoint`` is unset: the gateway then builds no SDK object at all and only
    passes a caller's W3C ``traceparent`` on to the worker, unchanged.
    """

    # http/protobuf: http://collector:4318 (``/v1/traces`` is added when the URL has no
    # path) or the full traces URL; grpc: http://collector:4317. https:// uses TLS.
    endpoint: str | None = None
    protocol: OtlpProtocol = "http/protobuf"
    service_name: str = Field("higgs-gateway", min_length=1)
    # Share of new traces recorded. A caller's trace keeps the caller's decision (its
    # traceparent's sampled flag), so a trace is never recorded in half its services.
    sample_ratio: float = Field(1.0, ge=0, le=1)
    # Sent with every export, e.g. a hosted backend's API key. Secrets: shown masked.
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    # Longest wait for one export; spans are sent in the background, never on a request.
    timeout_s: float = Field(10.0, gt=0)

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, endpoint: str | None) -> str | None:
        if endpoint is None or not endpoint.strip():
            return None
        endpoint = endpoint.strip()
        scheme, _, rest = endpoint.partition("://")
        if scheme.lower() not in ("http", "https") or not rest.strip("/"):
            raise ValueError("must be an http:// or https:// URL, e.g. http://jaeger:4318")
        return endpoint

    @property
    def enabled(self) -> bool:
        return self.endpoint is not None


class GatewayConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", validate_assignment=True
    )

    server: ServerConfig = Field(default_factory=ServerConfig)
    pools: PoolsConfig = Field(default_factory=PoolsConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    upstream: UpstreamConfig = Field(default_factory=UpstreamConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    load_reports: LoadReportConfig = Field(default_factory=LoadReportConfig)
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    voices: VoicesConfig = Field(default_factory=VoicesConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    slo: SloConfig = Field(default_factory=SloConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    planner: PlannerConfig = Field(default_factory=PlannerConfig)
    supervisor: SupervisorConfig = Field(default_factory=SupervisorConfig)
    data_dir: Path = Path("./data")

    @model_validator(mode="after")
    def _workers_serve_our_model(self) -> GatewayConfig:
        # The relay and the warm-up send models.served_model_name; a supervised worker
        # serving another name would answer every request with 404.
        for name, pool in self.pools.items():
            launched = pool.launch.served_model_name if pool.launch else None
            if launched is not None and launched != self.models.served_model_name:
                raise ValueError(
                    f"pools.{name.value}.launch.served_model_name ({launched!r}) must equal "
                    f"models.served_model_name ({self.models.served_model_name!r})"
                )
        return self

    @model_validator(mode="after")
    def _processes_are_replicas(self) -> GatewayConfig:
        # Several processes route as one only through the shared in-flight view; and each
        # would launch its own copy of a supervised pool's workers.
        if self.server.processes > 1:
            if self.state.backend != "redis" or not self.state.share_inflight:
                raise ValueError(
                    f"server.processes: {self.server.processes} needs state.backend: redis with "
                    "state.share_inflight (each process is a replica; they share the fleet's in-flight work there)"
                )
            supervised = [name.value for name, pool in self.pools.items() if pool.launch is not None]
            if supervised:
                raise ValueError(
                    f"server.processes > 1 with supervised pools ({', '.join(supervised)}): every process "
                    "would launch its own workers; run one process, or the workers outside the gateway"
                )
        return self

    @model_validator(mode="after")
    def _profile_changes_need_supervised_pools(self) -> GatewayConfig:
        # A GPU changes profile by restarting the other pool's launch command on it.
        if self.supervisor.profile_changes.enabled:
            missing = [name.value for name, pool in self.pools.items() if pool.launch is None]
            if missing:
                raise ValueError(
                    "supervisor.profile_changes.enabled needs every pool supervised (launch:); "
                    f"not supervised: {', '.join(missing)}"
                )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment over the file (passed as init kwargs): operators override one key
        # of a mounted config without rewriting it.
        return (env_settings, init_settings)


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> GatewayConfig:
    """Read the YAML file (if any), apply environment overrides, validate everything."""
    document: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the config must be a mapping at the top level")
        document = loaded
    if overrides:
        document = deep_merge(document, overrides)
    admin_token = os.environ.get(f"{ENV_PREFIX}ADMIN_TOKEN")
    if admin_token:
        document.setdefault("auth", {})["admin_token"] = admin_token
    try:
        return GatewayConfig(**document)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=str(path or "config"))) from exc


def format_validation_error(exc: ValidationError, source: str = "config") -> str:
    lines = [f"invalid {source}:"]
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "<root>"
        lines.append(f"  {key}: {error['msg']}")
    return "\n".join(lines)
