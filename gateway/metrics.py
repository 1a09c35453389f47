"""Every Prometheus series the gateway exports, in one place.

Two kinds of series live here:

* event series (counters, histograms) that the request path updates as things happen;
* live gauges (in-flight, capacity, worker health, queue depth, thresholds) that are
  *not* touched per request: a collector asks the fleet for one ``FleetSnapshot`` at
  scrape time, so the hot path pays nothing for them and they can never drift from the
  state routing actually uses.

Each ``GatewayMetrics`` owns its registry (no process-wide default), so two apps in one
process (tests, benchmarks) never share or collide on series. Label values are bounded
vocabularies (pools, SLA classes, the enums below, HTTP status codes, worker ids);
never request ids, voices or text. docs/observability.md documents every series.
The composition root turns off prometheus_client's ``*_created`` series (process-wide).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway import __version__
from gateway.types import PoolName, SlaClass
from gateway.types.error_kinds import RetryReason, UpstreamErrorKind
from gateway.types.labels import (
    NO_POOL,
    TTFP_BUCKETS,
    DisconnectPhase,
    EjectionReason,
    KeyResult,
    PlanBound,
    ProfileChangeResult,
    RejectReason,
    RestartReason,
)

log = logging.getLogger(__name__)

PREFIX = "higgs_gateway_"
# A whole request: short clips take a fraction of a second, Stage 0 caps audio near 82 s.
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
                    45.0, 60.0, 90.0, 120.0, 300.0)  # fmt: skip
# Real-time factor: ~0.28 at c1 on low-latency, ~0.5 at c16; above 1 audio plays faster
# than it is made.
RTF_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 5.0)
# Observed / predicted: 1.0 is a perfect prediction; both sides matter.
PREDICTION_RATIO_BUCKETS = (0.5, 0.67, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 4.0)
# Silence a real-time player sits through between two sentences: 0 is the goal.
GAP_BUCKETS = (0.0, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CANCEL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
# Admission queue wait: most requests wait 0; latency budgets are ~150 ms, throughput 120 s.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0,
                30.0, 60.0, 120.0)  # fmt: skip


class Children:
    """One labelled series' children, each looked up once. ``labels()`` checks and converts
    its arguments and takes a lock on every call, a cost the per-request path would pay
    a dozen times; label values are bounded vocabularies, so the cache stays small."""

    __slots__ = ("_metric", "_cache")

    def __init__(self, metric: Counter | Gauge | Histogram) -> None:
        self._metric = metric
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._cache.get(values)
        if child is None:
            child = self._cache[values] = self._metric.labels(*values)
        return child


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """One worker as the fleet sees it at scrape time."""

    pool: str
    worker: str  # the fleet's worker id: stable, one per worker, never per request
    inflight: int  # this gateway's own leases
    reported_load: float | None  # the worker's own running+waiting; None = never / not scraped
    up: bool  # routable right now (READY)
    report_age_s: float | None  # seconds since its last load report; None = never reported
    slots: int  # requests it should carry at once
    # The routing's learned curve at a few loads: load -> (predicted RTF, predicted TTFP s).
    curve: Mapping[int, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Everything the live gauges show, taken at one instant."""

    workers: Sequence[WorkerSnapshot] = ()
    queue_depths: Mapping[str, int] = field(default_factory=dict)  # sla_class -> queued requests
    thresholds: Mapping[str, float] = field(default_factory=dict)  # name -> effective value
    empty_pool_seconds: Mapping[str, float] = field(default_factory=dict)  # pool -> seconds with no routable worker
    degraded: bool = False  # serving, but some pool has no routable worker


SnapshotProvider = Callable[[], FleetSnapshot]


class FleetCollector(Collector):
    """Builds the live gauges from one snapshot per scrape."""

    def __init__(self, pools: Iterable[str], sla_classes: Iterable[str]) -> None:
        self._pools = tuple(pools)
        self._sla_classes = tuple(sla_classes)
        self._provider: SnapshotProvider | None = None

    def set_provider(self, provider: SnapshotProvider | None) -> None:
        self._provider = provider

    def describe(self) -> Iterable[Metric]:
        # Names only: lets the registry detect duplicates without calling the provider.
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        snapshot = FleetSnapshot()
        if self._provider is not None:
            try:
                snapshot = self._provider()
            except Exception:
                # A broken provider must not take /metrics (and every other series) down.
                log.exception("fleet snapshot failed; live gauges omitted from this scrape")
                return []
        return list(self._families(snapshot))

    def _families(self, snap: FleetSnapshot | None = None) -> Iterator[Metric]:
        pool_inflight = _gauge("pool_inflight", "Requests this gateway has in flight on the pool's workers.", ["pool"])
        pool_capacity = _gauge(
            "pool_capacity_slots", "Slots of the pool's routable workers (what routing may fill).", ["pool"]
        )
        w_inflight = _gauge("worker_inflight", "Requests this gateway has in flight on the worker.", ["pool", "worker"])
        w_reported = _gauge(
            "worker_reported_load",
            "The worker's own count of running+waiting requests (all gateways); absent until reported.",
            ["pool", "worker"],
        )
        w_up = _gauge("worker_up", "1 if the worker is routable (ready), else 0.", ["pool", "worker"])
        w_age = _gauge(
            "worker_report_age_seconds",
            "Seconds since the worker's last load report; absent until the first.",
            ["pool", "worker"],
        )
        queue = _gauge("admission_queue_depth", "Requests waiting in admission per SLA class.", ["sla_class"])
        threshold = _gauge(
            "routing_threshold", "Effective value of each routing threshold (config key as name).", ["name"]
        )
        w_rtf = _gauge(
            "worker_predicted_rtf",
            "The routing's learned RTF of every stream on the worker when it carries `load` requests.",
            ["pool", "worker", "load"],
        )
        w_ttfp = _gauge(
            "worker_predicted_ttfp_seconds",
            "The routing's learned TTFP of a request that makes the worker's load `load`.",
            ["pool", "worker", "load"],
        )
        empty_for = _gauge(
            "pool_empty_seconds", "Seconds the pool has had no routable worker; 0 while it has one.", ["pool"]
        )
        degraded = _gauge(
            "degraded", "1 while the gateway serves with a pool that has no routable worker, else 0.", []
        )
        families = (
            pool_inflight, pool_capacity, w_inflight, w_reported, w_up, w_age, queue, threshold, w_rtf, w_ttfp,
            empty_for, degraded,
        )  # fmt: skip
        if snap is None:
            yield from families
            return

        # Every known pool and class appears, at 0 when empty, so "no worker" reads as 0, not absent.
        inflight_by_pool = dict.fromkeys(self._pools, 0.0)
        capacity_by_pool = dict.fromkeys(self._pools, 0.0)
        for w in snap.workers:
            inflight_by_pool[w.pool] = inflight_by_pool.get(w.pool, 0.0) + w.inflight
            capacity_by_pool[w.pool] = capacity_by_pool.get(w.pool, 0.0) + (w.slots if w.up else 0)
            labels = [w.pool, w.worker]
            w_inflight.add_metric(labels, w.inflight)
            w_up.add_metric(labels, 1.0 if w.up else 0.0)
            if w.reported_load is not None:
                w_reported.add_metric(labels, w.reported_load)
            if w.report_age_s is not None and math.isfinite(w.report_age_s):
                w_age.add_metric(labels, w.report_age_s)
            for load, (rtf, ttfp) in w.curve.items():
                w_rtf.add_metric([*labels, str(load)], rtf)
                w_ttfp.add_metric([*labels, str(load)], ttfp)
        for pool, value in inflight_by_pool.items():
            pool_inflight.add_metric([pool], value)
        for pool, value in capacity_by_pool.items():
            pool_capacity.add_metric([pool], value)
        depths = {**dict.fromkeys(self._sla_classes, 0), **snap.queue_depths}
        for sla_class, depth in depths.items():
            queue.add_metric([str(sla_class)], depth)
        for name, value in snap.thresholds.items():
            threshold.add_metric([name], value)
        for pool in self._pools:
            empty_for.add_metric([pool], snap.empty_pool_seconds.get(pool, 0.0))
        degraded.add_metric([], 1.0 if snap.degraded else 0.0)
        yield from families


@dataclass(frozen=True, slots=True)
class PlannerGauges:
    """The fleet planner's last pass, as the gauges show it (docs/planner.md)."""

    judged: bool  # enough traffic in this pass to size the fleet
    desired: Mapping[str, int] = field(default_factory=dict)  # pool -> workers; empty before the first judgement
    bound_by: Mapping[str, str] = field(default_factory=dict)  # pool -> PlanBound value
    margin: float | None = None
    arrival_rates: Mapping[str, float] = field(default_factory=dict)  # sla_class -> smoothed requests/s


PlannerProvider = Callable[[], PlannerGauges]


class PlannerCollector(Collector):
    """The planner's gauges, read from its published plan at scrape time."""

    def __init__(self, pools: Iterable[str], sla_classes: Iterable[str]) -> None:
        self._pools = tuple(pools)
        self._sla_classes = tuple(sla_classes)
        self._provider: PlannerProvider | None = None

    def set_provider(self, provider: PlannerProvider | None) -> None:
        self._provider = provider

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None))

    def collect(self) -> Iterable[Metric]:
        if self._provider is None:
            return []
        try:
            gauges = self._provider()
        except Exception:
            log.exception("planner snapshot failed; planner gauges omitted from this scrape")
            return []
        return list(self._families(gauges))

    def _families(self, gauges: PlannerGauges | None) -> Iterator[Metric]:
        desired = _gauge(
            "desired_workers",
            "Workers the planner wants in the pool for the observed traffic; absent until it first "
            "had enough traffic to judge, then the last judged value.",
            ["pool"],
        )
        bound_by = _gauge(
            "planner_bound_by", "1 for the objective (or bound) that sets the pool's desired count, else 0.",
            ["pool", "objective"],
        )  # fmt: skip
        margin = _gauge(
            "planner_margin", "How much all traffic could grow (0.25 = 25%) before the desired mix misses an objective.", []
        )
        judged = _gauge("planner_judged", "1 when the last planner pass had enough traffic to judge, else 0.", [])
        rates = _gauge("planner_arrival_rate", "Requests per second reaching admission that the planner sizes for "
                       "(smoothed; forecast planner.forecast_s ahead when set), per SLA class.", ["sla_class"])  # fmt: skip
        families = (desired, bound_by, margin, judged, rates)
        if gauges is None:
            yield from families
            return
        for pool, count in gauges.desired.items():
            desired.add_metric([pool], count)
        for pool, bound in gauges.bound_by.items():
            for objective in PlanBound:
                bound_by.add_metric([pool, objective.value], 1.0 if objective.value == bound else 0.0)
        if gauges.margin is not None:
            margin.add_metric([], gauges.margin)
        judged.add_metric([], 1.0 if gauges.judged else 0.0)
        for sla_class in self._sla_classes:
            rates.add_metric([sla_class], gauges.arrival_rates.get(sla_class, 0.0))
        yield from families


def _gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, labels=labels)


def _event_loop_tasks() -> float:
    """The running loop's live tasks; NaN when rendered off the loop (``/metrics`` is an async route)."""
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:
        return float("nan")


class GatewayMetrics:
    """The gateway's series on a registry of its own; ``render()`` serves ``/metrics``.

    Contract with the request path (what the docs and alerts assume):
    every request that reaches the speech API counts once in ``requests`` with its final
    status (rejections included, pool ``"none"`` when it never reached one), and
    ``observe_request`` is the one call that records it.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        routing_reasons: Iterable[str] = (),
        process_metrics: bool = True,
        key_tiers: Iterable[str] = (),
        keys: Iterable[tuple[str, str]] = (),
        per_key: bool = False,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        pools = [p.value for p in PoolName]
        classes = [c.value for c in SlaClass]

        self.requests = Counter(
            PREFIX + "requests", "Speech requests by SLA class, pool and final HTTP status.",
            ["sla_class", "pool", "status"], registry=r,
        )  # fmt: skip
        self.request_duration = Histogram(
            PREFIX + "request_duration_seconds", "Request start to last byte sent (or failure).",
            ["sla_class", "pool"], buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttfp = Histogram(
            PREFIX + "ttfp_seconds", "Request start to the first audio byte sent to the client.",
            ["sla_class", "pool"], buckets=TTFP_BUCKETS, registry=r,
        )  # fmt: skip
        self.rtf = Histogram(
            PREFIX + "rtf_ratio", "Real-time factor of completed requests: duration / audio seconds.",
            ["pool"], buckets=RTF_BUCKETS, registry=r,
        )  # fmt: skip
        self.audio_seconds = Counter(
            PREFIX + "audio_seconds", "Seconds of audio delivered to clients.", ["pool"], registry=r
        )
        self.routing_decisions = Counter(
            PREFIX + "routing_decisions", "Routing decisions that sent a request to a pool, by reason.",
            ["sla_class", "pool", "reason"], registry=r,
        )  # fmt: skip
        self.admission_wait = Histogram(
            PREFIX + "admission_wait_seconds", "Time a request waited in admission before it was routed.",
            ["sla_class"], buckets=WAIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.rejections = Counter(
            PREFIX + "rejections", "Requests turned away by admission.", ["sla_class", "reason"], registry=r
        )
        self.upstream_errors = Counter(
            PREFIX + "upstream_errors", "Failed calls to workers, by kind.", ["pool", "kind"], registry=r
        )
        self.retries = Counter(
            PREFIX + "retries", "Requests retried on another worker (before the first byte).", ["reason"], registry=r
        )
        self.client_disconnects = Counter(
            PREFIX + "client_disconnects", "Clients that left before their request finished.", ["phase"], registry=r
        )
        self.worker_ejections = Counter(
            PREFIX + "worker_ejections", "Workers taken out of routing.", ["pool", "reason"], registry=r
        )
        self.worker_restarts = Counter(
            PREFIX + "worker_restarts", "Worker restarts noticed; each is replayed its voices before routing.",
            ["pool", "reason"], registry=r,
        )  # fmt: skip
        # Profile changes (supervisor.profile_changes): a GPU moved from one pool to the other.
        self.profile_changes = Counter(
            PREFIX + "profile_changes", "GPUs moved from one pool's deploy profile to the other's, by how it ended.",
            ["from_pool", "to_pool", "result"], registry=r,
        )  # fmt: skip
        self.profile_change_in_progress = Gauge(
            PREFIX + "profile_change_in_progress", "1 while a GPU is moving from one pool to the other (drain, restart, warm-up).",
            ["from_pool", "to_pool"], registry=r,
        )  # fmt: skip
        self.prediction_ratio = Histogram(
            PREFIX + "prediction_ratio",
            "Observed / predicted, per completed stream: how far the routing's curves are off "
            "(quantity: ttfp or rtf; 1.0 = exact).",
            ["pool", "quantity"], buckets=PREDICTION_RATIO_BUCKETS, registry=r,
        )  # fmt: skip
        self.load_tracking_fallbacks = Counter(
            PREFIX + "load_tracking_fallbacks",
            "Workers whose /load never counted (no --enable-server-load-tracking); their load is read from /metrics.",
            ["pool"],
            registry=r,
        )
        # The shared state (gateway.state): routing overrides, drains, voices, key limits.
        self.state_backend_up = Gauge(
            PREFIX + "state_backend_up",
            "1 while the state backend answers (always 1 for local); 0: serving from the last known state.",
            ["backend"],
            registry=r,
        )
        self.state_rate_limit_unavailable = Counter(
            PREFIX + "state_rate_limit_unavailable",
            "Keyed requests whose fleet-wide rate limit could not be checked, by the failure mode applied.",
            ["mode"],
            registry=r,
        )
        self.state_changes_applied = Counter(
            PREFIX + "state_changes_applied",
            "Shared-state changes made through other replicas and applied here, by kind.",
            ["kind"],
            registry=r,
        )
        # API-key usage: by tier, and by key (its configured name) only when asked, so the
        # number of series does not grow with the number of keys unless the operator wants it.
        self._per_key = per_key
        key_labels = ["tier", "key"] if per_key else ["tier"]
        self.key_requests = Counter(
            PREFIX + "key_requests", "Requests with an API key, by tier (and key) and what the key's limits made of them.",
            [*key_labels, "result"], registry=r,
        )  # fmt: skip
        self.key_audio_seconds = Counter(
            PREFIX + "key_audio_seconds", "Seconds of audio delivered, by API-key tier (and key).", key_labels, registry=r
        )
        self.key_streams = Gauge(
            PREFIX + "key_streams", "Speech requests in progress on this replica, by API-key tier (and key).",
            key_labels, registry=r,
        )  # fmt: skip
        # Voice sessions (WebSocket /v1/audio/speech/stream).
        self.sessions_open = Gauge(PREFIX + "sessions_open", "Voice sessions open on this replica.", registry=r)
        self.sessions = Counter(PREFIX + "sessions", "Voice sessions ended, by how they ended.", ["ended"], registry=r)
        self.session_buffered_audio = Gauge(
            PREFIX + "session_buffered_audio_bytes",
            "Voice-session audio received from workers and not yet sent to its client (each session holds at most its look-ahead window).",
            registry=r,
        )  # fmt: skip
        self.session_utterances = Counter(
            PREFIX + "session_utterances", "Utterances started in voice sessions (a first non-empty input.text).", registry=r
        )
        self.session_sentences = Counter(
            PREFIX + "session_sentences", "Voice-session sentences placed on a worker, by pool and routing reason.",
            ["pool", "reason"], registry=r,
        )  # fmt: skip
        self.session_first_audio = Histogram(
            PREFIX + "session_first_audio_seconds",
            "Per utterance: its first sentence complete (text in) to its first audio byte sent.",
            buckets=TTFP_BUCKETS, registry=r,
        )  # fmt: skip
        self.session_gap = Histogram(
            PREFIX + "session_gap_seconds",
            "Silence a real-time player (started at the utterance's first audio) sits through before each later sentence.",
            buckets=GAP_BUCKETS, registry=r,
        )  # fmt: skip
        self.session_barge_ins = Histogram(
            PREFIX + "session_barge_in_seconds",
            "input.cancel received to every upstream request of the utterance ended and input.cancelled sent.",
            buckets=CANCEL_BUCKETS, registry=r,
        )  # fmt: skip
        # Read at scrape time: a count that keeps growing while the traffic does not is a task leak.
        self.event_loop_tasks = Gauge(
            PREFIX + "event_loop_tasks", "asyncio tasks alive on the gateway's event loop.", registry=r
        )
        self.event_loop_tasks.set_function(_event_loop_tasks)
        self.build_info = Gauge(PREFIX + "build_info", "Always 1; the gateway's version.", ["version"], registry=r)
        self.build_info.labels(__version__).set(1)

        # The event series the request path updates, their children cached (``Children``).
        self.requests_by = Children(self.requests)
        self.request_duration_by = Children(self.request_duration)
        self.ttfp_by = Children(self.ttfp)
        self.rtf_by = Children(self.rtf)
        self.audio_seconds_by = Children(self.audio_seconds)
        self.routing_decisions_by = Children(self.routing_decisions)
        self.admission_wait_by = Children(self.admission_wait)
        self.rejections_by = Children(self.rejections)
        self.upstream_errors_by = Children(self.upstream_errors)
        self.retries_by = Children(self.retries)
        self.prediction_ratio_by = Children(self.prediction_ratio)
        self.client_disconnects_by = Children(self.client_disconnects)
        self.key_audio_seconds_by = Children(self.key_audio_seconds)
        self.key_streams_by = Children(self.key_streams)
        self.key_requests_by = Children(self.key_requests)

        self.fleet = FleetCollector(pools, classes)
        r.register(self.fleet)
        self.planner = PlannerCollector(pools, classes)
        r.register(self.planner)
        if process_metrics:
            # process_cpu_seconds_total & co: the gateway's own cost (the relay is CPU-bound).
            ProcessCollector(registry=r)

        # Known label sets start at 0 so rates and ratios exist before the first event.
        for pool in pools:
            self.load_tracking_fallbacks.labels(pool)
        for sla_class in classes:
            self.admission_wait.labels(sla_class)
            for pool in pools:
                self.requests.labels(sla_class, pool, "200")
                self.request_duration.labels(sla_class, pool)
                self.ttfp.labels(sla_class, pool)
                for reason in routing_reasons:
                    self.routing_decisions.labels(sla_class, pool, reason)
            for reject in RejectReason:
                self.rejections.labels(sla_class, reject)
        for pool in pools:
            self.rtf.labels(pool)
            for quantity in ("ttfp", "rtf"):
                self.prediction_ratio.labels(pool, quantity)
            self.audio_seconds.labels(pool)
            for kind in UpstreamErrorKind:
                self.upstream_errors.labels(pool, kind)
            for ejection in EjectionReason:
                self.worker_ejections.labels(pool, ejection)
            for restart in RestartReason:
                self.worker_restarts.labels(pool, restart)
        for source in pools:
            for target in pools:
                if source == target:
                    continue
                self.profile_change_in_progress.labels(source, target).set(0)
                for result in ProfileChangeResult:
                    self.profile_changes.labels(source, target, result)
        for retry in RetryReason:
            self.retries.labels(retry)
        for series in {(tier,) for tier in key_tiers} if not per_key else set(keys):
            self.key_audio_seconds.labels(*series)
            self.key_streams.labels(*series)
            for result in KeyResult:
                self.key_requests.labels(*series, result)
        for phase in DisconnectPhase:
            self.client_disconnects.labels(phase)

    def set_snapshot_provider(self, provider: SnapshotProvider | None) -> None:
        """The fleet's ``() -> FleetSnapshot``; called once per scrape, must not block.

        It runs on the thread that renders (the event loop when ``/metrics`` is an async
        route), so it may read the fleet's state without locks.
        """
        self.fleet.set_provider(provider)

    def set_planner_provider(self, provider: PlannerProvider | None) -> None:
        """The planner's ``() -> PlannerGauges`` (its published plan); called once per scrape."""
        self.planner.set_provider(provider)

    def observe_request(
        self,
        *,
        sla_class: str,
        pool: str | None,
        status: int,
        duration_s: float,
        ttfp_s: float | None = None,
        audio_s: float = 0.0,
    ) -> None:
        """Record one finished request (success, failure or rejection) in every event series."""
        pool_label = pool or NO_POOL
        self.requests_by(sla_class, pool_label, str(status)).inc()
        if pool is None:
            return  # never reached a worker: no latency or audio to speak of
        self.request_duration_by(sla_class, pool).observe(duration_s)
        if ttfp_s is not None:
            self.ttfp_by(sla_class, pool).observe(ttfp_s)
        if audio_s > 0:
            self.audio_seconds_by(pool).inc(audio_s)
            if 200 <= status < 300:
                self.rtf_by(pool).observe(duration_s / audio_s)

    def key_series(self, tier: str, key: str) -> tuple[str, ...]:
        """The label values of one key's usage series: its tier, and its name when per key."""
        return (tier, key) if self._per_key else (tier,)

    def routing_decision_totals(self) -> dict[tuple[str, str], float]:
        """Routing decisions so far by (pool, reason), summed over SLA classes."""
        totals: dict[tuple[str, str], float] = {}
        for metric in self.routing_decisions.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    key = (sample.labels["pool"], sample.labels["reason"])
                    totals[key] = totals.get(key, 0.0) + sample.value
        return totals

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """Exposition bytes and content type; OpenMetrics when the scraper asks for it."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
