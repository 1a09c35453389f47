"""The composition root: one config in, the whole gateway out, started and stopped here.

``create_app`` builds every part once, hands each its dependencies through its
constructor, and assembles the one ASGI stack that ``serve``, ``demo`` and the tests all
run::

    CORSMiddleware (when server.cors_origins is set)
      Entry: the request id, then its table (docs/architecture.md, "The ASGI stack"):
        WebSocket /v1/audio/speech/stream -> SessionEndpoint.enter (voice sessions)
        POST /v1/audio/speech -> SpeechEntry.enter -> SpeechPipeline
        anything else -> FastAPI: every other route, error envelopes, lifespan -> start/stop

Tests pass a transport (the relay's HTTP client), a control client (probes, load
reports, voices, warm-up), a clock, a discovery factory, a stream observer, a tracer
provider or a desired worker mix; nothing else differs from production.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import httpx
from fastapi import FastAPI
from httpx_aiohttp import AiohttpTransport
from opentelemetry.trace import TracerProvider
from prometheus_client import disable_created_metrics
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import __version__
from gateway.access_log import AccessLog
from gateway.api import admin, admin_voices, health, models, playground, voices
from gateway.api.access import ApiKeyGate
from gateway.api.errors import install_error_handlers
from gateway.api.entry import Entry, EntryPath
from gateway.api.fast_path import SpeechEntry, speech_route
from gateway.api.session_entry import SessionEndpoint
from gateway.api.speech import SpeechPipeline
from gateway.api.speech_request import max_speech_body_bytes
from gateway.audio.delay import FirstAudioDelays
from gateway.audio.factory import open_encoder
from gateway.config import GatewayConfig, PoolConfig
from gateway.metrics import FleetSnapshot, GatewayMetrics, PlannerGauges, WorkerSnapshot
from gateway.planner.planner import FleetPlanner
from gateway.pools.availability import PoolAvailability
from gateway.pools.discovery import Discovery, create_discovery
from gateway.pools.view import FleetView
from gateway.pools.drains import DrainStore
from gateway.pools.fleet import Fleet
from gateway.pools.health import HealthChecker
from gateway.pools.lease import Lease
from gateway.pools.load_reports import LoadReporter
from gateway.pools.preparation import WorkerPreparation
from gateway.pools.restarts import RestartDetector
from gateway.pools.sink import WorkerSink
from gateway.pools.specs import load_pool_profiles, pool_specs
from gateway.quality.service import QualityService
from gateway.recorder import Recorder
from gateway.routing import core as routing_core
from gateway.routing.admission import Admission
from gateway.routing.control import RoutingControl
from gateway.routing.performance import PerformanceModel
from gateway.routing.prior import pool_priors
from gateway.routing.thresholds import ThresholdStore
from gateway.routing.performance import EMPTY_SNAPSHOT
from gateway.routing.thresholds import effective_thresholds
from gateway.security.admin import AdminAuth
from gateway.security.auth import ApiKeyAuth
from gateway.security.ref_audio import RefAudioPolicy
from gateway.sessions.sentence import SentenceUpstream
from gateway.sessions.session import SessionLimits
from gateway.sessions.voice import SessionVoices
from gateway.state.replicas import ReplicaSync
from gateway.state.shared import SharedState, VoiceMirrorOnLoop, create_backend, create_shared_inflight, shares_inflight
from gateway.supervisor.pool import PoolSupervisor
from gateway.supervisor.mix import DesiredMix
from gateway.supervisor.profile_change import ChangeFleet, ChangeObserver, ProfileChanger
from gateway.supervisor.setup import build_supervisors
from gateway.telemetry.request_context import send_request_id
from gateway.telemetry.tracing import OtelTracing, SpeechTracing
from gateway.types import SPEECH_PATH, SPEECH_STREAM_PATH, PoolName, WorkerState, reasons
from gateway.telemetry.propagation import PassThroughTracing
from gateway.types.curve import Curve
from gateway.types.observations import StreamObserver
from gateway.upstream.call import Upstream
from gateway.upstream.events import HealthReports
from gateway.upstream.relay import Relay
from gateway.upstream.transport import UpstreamTransport, create_transport
from gateway.voices.registry import VoiceRegistry
from gateway.voices.store import VoiceStore
from gateway.worker_payload import WorkerPayloads, max_new_tokens_limit

DiscoveryFactory = Callable[[PoolName, PoolConfig, WorkerSink], Discovery]
log = logging.getLogger("higgs_gateway")

CORS_EXPOSED_HEADERS = [
    "x-request-id", "x-gateway-pool", "x-gateway-route-reason", "x-gateway-predicted-ttfp-ms", "x-gateway-predicted-rtf",
]  # fmt: skip


def control_client_for(config: GatewayConfig) -> httpx.AsyncClient:
    # Control-plane HTTP (probes, load reports, voices, warm-up): not the hot path.
    # httpx's API over aiohttp's transport: probes and load polls run every second per
    # worker, and httpx's default transport costs several times more CPU per call.
    return httpx.AsyncClient(
        transport=AiohttpTransport(limits=httpx.Limits(max_connections=256, max_keepalive_connections=64)),
        timeout=httpx.Timeout(10.0, connect=config.upstream.connect_timeout_s),
        event_hooks={"request": [send_request_id]},  # voice fan-outs carry the request's id
    )


class GatewayApp:
    """The running gateway: an ASGI app (the full stack) that owns its parts' start and stop.

    The parts are attributes for operators' tools and tests to look at; requests never
    reach through this object.
    """

    def __init__(
        self,
        stack: ASGIApp,
        api: FastAPI,
        *,
        fleet: Fleet,
        admission: Admission,
        recorder: Recorder,
        voices: VoiceRegistry,
        discoveries: list[Callable[[], Discovery]],
        health: HealthChecker,
        load_reports: LoadReporter,
        replicas: ReplicaSync,
        shared_state: SharedState,
        supervisors: list[PoolSupervisor],
        transport: UpstreamTransport,
        profile_changer: ProfileChanger | None = None,
        control_client: httpx.AsyncClient,
        performance: PerformanceModel,
        planner: FleetPlanner,
        availability: PoolAvailability,
        tracer_shutdown: Callable[[], object] | None = None,
    ) -> None:
        self._stack = stack
        self._availability = availability
        self.api = api  # the framework app inside the stack: routes and the OpenAPI schema
        self.fleet = fleet
        self.admission = admission
        self.recorder = recorder
        self.voices = voices
        self._discovery_factories = discoveries
        self._discoveries: list[Discovery] = []
        self._health = health
        self._load_reports = load_reports
        self._replicas = replicas
        self._shared_state = shared_state
        self._supervisors = supervisors
        self.profile_changer = profile_changer
        self._transport = transport
        self._control_client = control_client
        self.performance = performance
        self._learning: asyncio.Task[None] | None = None
        self.planner = planner
        self._planning: asyncio.Task[None] | None = None
        self._tracer_shutdown = tracer_shutdown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._stack(scope, receive, send)

    @property
    def asgi(self) -> ASGIApp:
        """The stack itself, for the server: one coroutine frame less on every resumption
        of every request than calling through ``__call__`` (lifespan included: it is the
        framework app's, inside the stack)."""
        return self._stack

    async def start(self) -> None:
        # The shared state first: routing, drains and voices as the fleet has them before
        # any worker is prepared or any request admitted.
        await self._shared_state.start()
        for factory in self._discovery_factories:
            discovery = factory()
            await discovery.start()
            self._discoveries.append(discovery)
        self._health.start()
        self._load_reports.start()
        self._replicas.start()
        # Curves are refit here, in the background, and only read by routing and metrics.
        self._learning = asyncio.create_task(self.performance.run(self.fleet.view.snapshot), name="learning")
        if self.planner.config.enabled:
            # The desired mix is sized here, in the background, from the published curves.
            self._planning = asyncio.create_task(self.planner.run(), name="planner")
        for supervisor in self._supervisors:
            await supervisor.start()
        if self.profile_changer is not None:
            self.profile_changer.start()

    async def stop(self) -> None:
        """Stop admitting, let in-flight requests finish (the server drains them within
        its grace period before calling this), then stop everything started."""
        self._availability.stopping()  # pools emptied by the stop itself are no outage
        self.admission.close()
        for discovery in self._discoveries:
            await discovery.stop()
        await self._replicas.stop()
        await self._health.stop()
        await self._load_reports.stop()
        for task in (self._learning, self._planning):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.profile_changer is not None:
            await self.profile_changer.stop()  # before the supervisors: no change half made
        await self.fleet.readiness.close()
        for supervisor in self._supervisors:
            await supervisor.stop()
        await self._transport.close()
        await self._control_client.aclose()
        await self._shared_state.stop()
        if self._tracer_shutdown is not None:
            # Flushes the spans still batched; blocking I/O, so off the event loop.
            await asyncio.to_thread(self._tracer_shutdown)


def create_app(
    config: GatewayConfig,
    *,
    transport: UpstreamTransport | None = None,
    control_client: httpx.AsyncClient | None = None,
    clock: Callable[[], float] = time.monotonic,
    discovery_factory: DiscoveryFactory = create_discovery,
    stream_observer: StreamObserver | None = None,
    tracer_provider: TracerProvider | None = None,
    desired_mix: DesiredMix | None = None,
) -> GatewayApp:
    """Raises ``ProfileCheckFailed`` when a supervised pool's deploy profile is unusable,
    ``ConfigError`` when tracing is configured but its SDK is not installed.

    ``tracer_provider``: spans go there whatever ``tracing:`` says (its owner shuts it down).
    ``desired_mix``: workers per pool the traffic needs; None: the gateway's own fleet
    planner (``planner:``). With ``supervisor.profile_changes.enabled`` supervised GPUs follow it.
    """
    data_dir = config.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    transport = transport or create_transport(config.upstream)
    control_client = control_client or control_client_for(config)

    tracing, tracer_shutdown = speech_tracing(config, tracer_provider, clock)
    # Observing: every metric and access-log line goes through the recorder.
    # No ``*_created`` series: in the classic text format each counter and histogram child
    # would export a second series holding its creation time. prometheus_client's switch is
    # process-wide and read at scrape time, so it is thrown here, not at import.
    disable_created_metrics()
    auth = config.auth
    metrics = GatewayMetrics(
        routing_reasons=reasons.ROUTE_REASONS,
        key_tiers=auth.tier_names() if auth.keys_configured else (),
        keys=[(key.tier, key.name) for key in auth.keys],
        per_key=auth.per_key_metrics,
    )
    access_log = AccessLog(enabled=config.logging.access_log, log_input_text=config.logging.log_input_text)
    # Routing overrides, drains, voices and key limits shared with other replicas: with a
    # shared store (state.backend: redis) each store writes there first (its mirror).
    state_backend = create_backend(config.state)
    drains = DrainStore.in_data_dir(data_dir, mirror=state_backend)
    thresholds = ThresholdStore.in_data_dir(data_dir, config.routing)
    # Each pool's deploy profile, read once: slots, prior curves and the supervisor's check.
    profiles = load_pool_profiles(config)
    # Workers and routing: by prediction, every worker's curve learned from the streams the
    # recorder sees; the `latency` traffic admission sees sizes the latency reserve.
    profile_priors = pool_priors(profiles)
    specs = pool_specs(config, profiles)
    fleet = Fleet.build(config, specs, clock=clock, drained=drains.ids)
    core = routing_core.build(
        thresholds.current(),
        config.admission,
        fleet.view.snapshot,
        fleet.leases.lease,  # the slot is held as the policy chooses it
        clock,
        priors=profile_priors,
        any_routable=fleet.view.any_routable,
        thresholds=thresholds.thresholds,
        # Replicas sharing Redis: a held slot is confirmed against every replica's leases.
        confirm=Lease.confirm if shares_inflight(config.state) else None,
    )
    admission, performance = core.admission, core.performance
    observers = [performance] if stream_observer is None else [performance, stream_observer]
    recorder = Recorder(metrics, access_log, observers)

    # The fleet planner: arrivals counted at admission, the desired mix sized in the background.
    planner = FleetPlanner(config.planner, performance.snapshot, clock)
    metrics.set_planner_provider(partial(planner_gauges, planner))
    if config.planner.enabled:
        admission.count_arrivals(planner.record_arrival)

    # Replicas sharing Redis count each other's leases on every worker (None: one replica).
    inflight = create_shared_inflight(
        config.state,
        fleet.members,
        fleet.events,
        cap_of=lambda worker: thresholds.thresholds().max_per_worker.get(worker.pool) or worker.slots,
        on_shared=recorder.fleet_view_shared,
    )
    if inflight is not None:
        fleet.leases.share(inflight)
        fleet.view.show_sharing(inflight.describe)
    fleet.events.on_slot_freed(admission.capacity_changed)
    fleet.events.on_capacity_change(admission.capacity_changed)
    fleet.events.on_ejection(recorder.worker_ejected)
    # A restarted worker is a new process: count it, and forget the curve learned from the old one.
    fleet.events.on_worker_restarted(recorder.worker_restarted)
    fleet.events.on_worker_restarted(lambda worker, _why: performance.reset_worker(worker.worker_id))
    # Ready while any pool serves (degraded), or only while every pool does (server.ready_requires).
    availability = PoolAvailability(fleet.view.routable_count, config.server.ready_requires, clock=clock)
    fleet.events.on_capacity_change(availability.refresh)
    metrics.set_snapshot_provider(partial(fleet_gauges, fleet.view, admission, thresholds, clock, performance, availability))
    routing = RoutingControl(thresholds, admission, fleet.view, performance, profile_priors, mirror=state_backend)

    # Voices, worker preparation and the background loops that keep the view true.
    voice_targets = (WorkerState.READY, WorkerState.EJECTED)  # answer HTTP; starting ones get a replay
    voice_mirror = VoiceMirrorOnLoop(state_backend) if state_backend is not None else None
    voice_registry = VoiceRegistry(
        VoiceStore.in_data_dir(data_dir, config.voices, mirror=voice_mirror),
        control_client,
        lambda: [w for w in fleet.view.workers if w.state in voice_targets],
        streams=lambda url: sum(w.inflight for w in fleet.view.workers if w.url == url),
    )
    shared_state = SharedState(
        config.state,
        state_backend,
        routing=routing,
        thresholds=thresholds,
        drains=drains,
        fleet=fleet.members,
        voices=voice_registry.store,
        voice_mirror=voice_mirror,
        voices_changed=voice_registry.replay_all_later,
        observer=recorder,
        inflight=inflight,
    )
    fleet.readiness.set_hook(WorkerPreparation(config, specs, voice_registry, control_client).prepare)
    # After each good probe: is the same process still behind the address?
    restarts = (
        RestartDetector(control_client, config.health.timeout_s, voice_registry.missing_on)
        if config.health.detect_restarts
        else None
    )
    health_checker = HealthChecker(fleet.view, fleet.health, control_client, config.health, clock=clock, restarts=restarts)
    load_reporter = LoadReporter(
        fleet.view, control_client, config.load_reports, clock=clock, on_untracked=recorder.load_tracking_fallback
    )
    # Replicas on one data directory follow its files; on a shared store its follower does.
    replicas = ReplicaSync(routing, drains, fleet.members, voice_registry, clock, follow_data_dir=state_backend is None)
    # Supervised pools: profiles are checked here, so a bad one stops the start-up.
    supervisors = build_supervisors(config, fleet.members, profiles, is_ready=fleet.health.has_answered)
    # GPUs follow the planner's desired mix (tests may pass another judge of the traffic).
    mix = desired_mix if desired_mix is not None else (planner if config.planner.enabled else None)
    profile_changer = profile_changer_for(config, supervisors, fleet.members, mix, recorder)
    # Pools without ``launch`` find their workers by discovery (built at start: some need the loop).
    discoveries = [partial(discovery_factory, pool, pool_config, fleet.members) for pool, pool_config in config.pools.items() if pool_config.launch is None]

    # The request path.
    keys = ApiKeyAuth(auth, limiter=shared_state.rate_limiter, streams=shared_state.stream_limiter)
    api_keys = ApiKeyGate(keys, auth.open_listings, recorder)
    # Audio quality: a share of completed streams scored off the request path (docs/quality.md).
    quality = (
        QualityService(
            config.quality, metrics.registry, fleet.members, fleet.health, control_client,
            config.models.served_model_name, config.upstream.first_byte_timeout_s + 60.0, clock,
        )  # fmt: skip
        if config.quality.enabled
        else None
    )
    if quality is not None:
        fleet.events.on_capacity_change(quality.forget_absent)  # a worker gone for good: its records too
    # Every attempt and stream end is told to the worker's health and the recorder (upstream.events).
    relay = Relay(
        transport, (HealthReports(fleet.health), recorder), admission, config.upstream, clock=clock,
        taps=quality.sampler if quality else None,
    )  # fmt: skip
    upstream = Upstream(admission, relay)
    # One set of checks and one payload for requests and session sentences alike.
    payloads = WorkerPayloads(
        config.models, config.voices, voice_registry.store, RefAudioPolicy(config.auth),
        max_new_tokens_limit(profile.talker.max_model_len for profile in profiles.values()),
    )
    speech = SpeechPipeline(
        auth=api_keys,
        admission=admission,
        payloads=payloads,
        upstream=upstream,
        encoders=open_encoder,
        recorder=recorder,
        # A body no valid speech request needs is refused as it is read, before parsing.
        max_body_bytes=min(config.server.max_body_bytes, max_speech_body_bytes(config.auth.ref_audio_max_bytes)),
        body_timeout_s=config.server.body_timeout_s,
        tracing=tracing,
        allow_pool_pin=config.routing.allow_pool_pin,
        affinity=fleet.affinity,
        first_audio=FirstAudioDelays(),
    )

    # Voice sessions: every sentence goes through the same admission and relay as a request.
    sessions_config = config.sessions
    sessions = SessionEndpoint(
        auth=api_keys,
        admission=admission,
        upstream=SentenceUpstream(upstream, clock, recorder),
        voices=SessionVoices(payloads),
        # A session sends each sentence as one file: no early start (its padding would be in it).
        encoders=partial(open_encoder, early_start=False),
        limits=SessionLimits(
            sessions_config.config_timeout_s, sessions_config.idle_timeout_s, sessions_config.max_buffered_chars,
            sessions_config.max_queued_sentences, sessions_config.max_duration_s, sessions_config.lookahead_s,
            sessions_config.send_timeout_s,
        ),
        observer=recorder,
        allowed_origins=config.server.cors_origins,
        max_open_per_replica=sessions_config.max_open_per_replica,
        clock=clock,
        tracing=tracing,
        retry_after_s=config.admission.retry_after_s,
    )

    gateway: GatewayApp | None = None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        assert gateway is not None
        await gateway.start()
        if quality is not None:
            quality.start()
        try:
            yield
        finally:
            if quality is not None:
                await quality.stop()
            await gateway.stop()

    app = FastAPI(
        title="Higgs-Audio gateway",
        version=__version__,
        summary="OpenAI-compatible speech API over low-latency and high-throughput vllm-omni pools.",
        lifespan=lifespan,
    )
    install_error_handlers(app)
    app.include_router(speech_route(speech))
    app.include_router(
        voices.create_router(config.voices, config.auth, config.server.max_body_bytes, api_keys, voice_registry, config.server.body_timeout_s)
    )
    app.include_router(models.create_router(config.models, api_keys))
    app.include_router(health.create_router(availability, admission, metrics, config.server.ready_requires))
    admin_router = admin.create_router(
        config, AdminAuth(config.auth), routing, thresholds, fleet.view, fleet.members, drains, admission, performance,
        availability=availability, decision_totals=metrics.routing_decision_totals, planner=planner,
        profile_changes=profile_changer.describe if profile_changer is not None else None,
    )  # fmt: skip
    # Not in /openapi.json, /docs or /redoc: the control surface is documented for operators
    # (README, docs/routing.md), not advertised to every client that can reach the API.
    app.include_router(admin_router, include_in_schema=False)
    admin_voice_router = admin_voices.create_router(
        config.voices, config.server.max_body_bytes, AdminAuth(config.auth), voice_registry, config.server.body_timeout_s
    )
    app.include_router(admin_voice_router, include_in_schema=False)
    if config.server.playground:
        app.include_router(playground.create_router())
    # The entry table: the paths served before the framework (the request id set once for all).
    stack: ASGIApp = Entry((
        EntryPath("websocket", None, SPEECH_STREAM_PATH, sessions.enter),
        EntryPath("http", "POST", SPEECH_PATH, SpeechEntry(speech).enter),
    ), app)  # fmt: skip
    if config.server.cors_origins:
        stack = CORSMiddleware(
            stack,
            allow_origins=config.server.cors_origins,
            allow_methods=["GET", "POST", "DELETE", "PATCH"],
            allow_headers=["*"],
            expose_headers=CORS_EXPOSED_HEADERS,
        )
    gateway = GatewayApp(
        stack,
        app,
        availability=availability,
        fleet=fleet,
        admission=admission,
        recorder=recorder,
        voices=voice_registry,
        discoveries=discoveries,
        health=health_checker,
        load_reports=load_reporter,
        replicas=replicas,
        shared_state=shared_state,
        supervisors=supervisors,
        profile_changer=profile_changer,
        transport=transport,
        control_client=control_client,
        performance=performance,
        planner=planner,
        tracer_shutdown=tracer_shutdown,
    )
    return gateway


def profile_changer_for(
    config: GatewayConfig,
    supervisors: list[PoolSupervisor],
    fleet: ChangeFleet,
    desired_mix: DesiredMix | None,
    observer: ChangeObserver,
) -> ProfileChanger | None:
    """GPUs follow the desired mix only when switched on and something judges the mix."""
    if not config.supervisor.profile_changes.enabled:
        return None
    if desired_mix is None:
        log.info("supervisor.profile_changes is on but nothing computes a desired mix: no profile changes")
        return None
    return ProfileChanger(
        config.supervisor.profile_changes,
        {supervisor.pool: supervisor for supervisor in supervisors},
        fleet,
        desired_mix,
        observer=observer,
    )


def speech_tracing(
    config: GatewayConfig, provider: TracerProvider | None, clock: Callable[[], float] = time.monotonic
) -> tuple[SpeechTracing, Callable[[], object] | None]:
    """Spans through ``provider``, or through an OTLP-exporting SDK provider when
    ``tracing.endpoint`` is set (with its shutdown); else no spans and no SDK at all."""
    if provider is not None:
        return OtelTracing(provider, clock), None
    if not config.tracing.enabled:
        return PassThroughTracing(), None
    from gateway.telemetry.otlp import tracer_provider  # the SDK: loaded only when tracing

    owned = tracer_provider(config.tracing)
    return OtelTracing(owned, clock), owned.shutdown


# ---- gauges read at scrape time: the fleet's and the planner's, wired here ---------------
# Loads the learned curves are exported at: few, so the series stay low-cardinality.
CURVE_LOADS = (1, 2, 4, 8, 16, 32, 64)


def fleet_gauges(
    fleet: FleetView,
    admission: Admission,
    thresholds: ThresholdStore,
    clock: Callable[[], float],
    performance: PerformanceModel | None = None,
    availability: PoolAvailability | None = None,
) -> FleetSnapshot:
    """The fleet as ``/metrics`` shows it, read at scrape time (never a refit)."""
    now = clock()
    pools = availability.current() if availability is not None else None
    curves = performance.snapshot() if performance is not None else EMPTY_SNAPSHOT
    workers = [
        WorkerSnapshot(
            pool=w.pool.value,
            worker=w.worker_id,
            inflight=w.inflight,
            reported_load=w.reported_load,
            up=w.routable,
            report_age_s=None if w.reported_at is None else now - w.reported_at,
            slots=w.slots,
            report_leak=w.report_leak,
            curve=_curve_points(curves.curve(w.worker_id, w.pool)),
        )
        for w in fleet.workers
        if w.state is not WorkerState.STOPPED
    ]
    return FleetSnapshot(
        workers=workers,
        queue_depths={sla.value: depth for sla, depth in admission.queue_depths().items()},
        thresholds=effective_thresholds(thresholds.thresholds(), fleet.snapshot()),
        empty_pool_seconds=pools.empty_for_s if pools is not None else {},
        degraded=pools.degraded if pools is not None else False,
    )


def planner_gauges(planner: FleetPlanner) -> PlannerGauges:
    """The planner's gauges: read from its published plan at scrape time."""
    plan = planner.snapshot()
    sizing = plan.sizing
    rates = {} if plan.arrivals is None else {sla.value: a.rate for sla, a in plan.arrivals.classes.items()}
    if sizing is None:
        return PlannerGauges(judged=plan.judged, arrival_rates=rates)
    return PlannerGauges(
        judged=plan.judged,
        desired={pool.value: count for pool, count in sizing.workers.items()},
        bound_by={pool.value: bound.value for pool, bound in sizing.bound_by.items()},
        margin=sizing.margin,
        arrival_rates=rates,
    )


def _curve_points(curve: Curve | None) -> dict[int, tuple[float, float]]:
    if curve is None:
        return {}
    return {load: (curve.rtf(load), curve.ttfp(load)) for load in CURVE_LOADS if load <= curve.max_load}
