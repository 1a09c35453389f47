"""The running gateway: every part built from one config, and the small services routes use.

Routes stay thin: they parse HTTP and call the methods here; nothing in this module
touches HTTP framing, and nothing in the routes owns state. Built by ``create_app``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from httpx_aiohttp import AiohttpTransport
from fastapi import Request

from gateway import __version__
from gateway.access_log import AccessLog, AccessRecord
from gateway.api.errors import ApiError, bad_request
from gateway.api.speech_request import SpeechRequest, worker_payload
from gateway.audio.encoder import StreamEncoder
from gateway.audio.factory import open_encoder
from gateway.config import GatewayConfig, PoolConfig, WarmupConfig
from gateway.metrics import FleetSnapshot, GatewayMetrics, WorkerSnapshot, threshold_values
from gateway.pools.availability import PoolAvailability
from gateway.pools.background import BackgroundLoop
from gateway.pools.discovery import Discovery, create_discovery
from gateway.pools.fleet import Fleet, pool_specs
from gateway.pools.health import HealthChecker
from gateway.pools.lease import Lease
from gateway.pools.load_reports import LoadReporter
from gateway.pools.restarts import RestartDetector
from gateway.pools.worker import Worker
from gateway.routing import reasons
from gateway.routing.admission import Admission
from gateway.routing.model import Action, Decision, RequestInfo
from gateway.routing.policy import create_policy
from gateway.routing.thresholds import ThresholdStore, ThresholdUpdateError
from gateway.security.admin import AdminAuth
from gateway.security.auth import ApiKeyAuth
from gateway.security.errors import AuthError
from gateway.security.ref_audio import RefAudioPolicy
from gateway.supervisor.setup import build_supervisors
from gateway.supervisor.warmup import batch_sizes_for, warm_up
from gateway.types import SLA_CLASS_HEADER, PoolName, SlaClass, WorkerState
from gateway.voices.registry import VoiceRegistry
from gateway.voices.resolve import list_voices, resolve_voice
from gateway.voices.store import VoiceStore
from gateway.upstream.relay import OpenStream, Relay, RetryPicker
from gateway.upstream.retry import RETRY_OTHER_WORKER, pick_retry_worker
from gateway.upstream.transport import create_transport

log = logging.getLogger("higgs_gateway")
DiscoveryFactory = Callable[[PoolName, PoolConfig, Fleet], Discovery]
VOICE_SYNC_INTERVAL_S = 10.0
SHARED_STATE_INTERVAL_S = 2.0


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        clock: Any = time.monotonic,
        discovery_factory: DiscoveryFactory = create_discovery,
    ) -> None:
        self.config = config
        self._discovery_factory = discovery_factory  # tests inject resolvers / API fakes here
        self.shutting_down = False
        self._clock = clock
        data_dir = Path(config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)

        self.metrics = GatewayMetrics(routing_reasons=(*reasons.ROUTE_REASONS, RETRY_OTHER_WORKER))
        self.access_log = AccessLog(enabled=config.logging.access_log, log_input_text=config.logging.log_input_text)
        self.thresholds = ThresholdStore.in_data_dir(data_dir, config.routing)

        self.fleet = Fleet(config, pool_specs(config), clock=clock)
        self.admission = Admission(
            config.admission,
            create_policy(self.thresholds.current().policy),
            thresholds=self.thresholds.thresholds,
            snapshot=self.fleet.snapshot,
            clock=clock,
            observer=_AdmissionMetrics(self.metrics),
        )
        self.fleet.on_capacity_change(self.admission.capacity_changed)
        self.fleet.on_ejection(lambda worker, reason: self.metrics.worker_ejections.labels(worker.pool.value, reason).inc())
        self.fleet.on_worker_restarted(lambda worker, why: self.metrics.worker_restarts.labels(worker.pool.value, why).inc())
        self.availability = PoolAvailability(self.fleet.routable_count, config.server.ready_requires, clock=clock)
        self.fleet.on_capacity_change(self.availability.refresh)

        # Control-plane HTTP (probes, load reports, voices, warm-up): not the hot path.
        # httpx's API over aiohttp's transport: probes and load polls run every second per
        # worker, and httpx's default transport costs several times more CPU per call.
        self.control_client = httpx.AsyncClient(
            transport=AiohttpTransport(limits=httpx.Limits(max_connections=256, max_keepalive_connections=64)),
            timeout=httpx.Timeout(10.0, connect=config.upstream.connect_timeout_s),
        )
        self.transport = create_transport(config.upstream)
        self.relay = Relay(self.transport, self.fleet, config.upstream, _RelayMetrics(self.metrics))
        self.load_reports = LoadReporter(self.fleet, self.control_client, config.load_reports, clock=clock)
        self.metrics.set_snapshot_provider(self.fleet_snapshot)

        self._aliases = {config.models.served_model_name, *config.models.aliases}
        self.api_keys = ApiKeyAuth(config.auth)
        self.admin_auth = AdminAuth(config.auth)
        self.ref_audio = RefAudioPolicy(config.auth)
        self.voices = VoiceRegistry(VoiceStore.in_data_dir(data_dir, config.voices), self.control_client, self._voice_targets)
        restarts = (
            RestartDetector(self.control_client, config.health.timeout_s, self.voices.missing_on)
            if config.health.detect_restarts
            else None
        )
        self.health = HealthChecker(self.fleet, self.control_client, config.health, clock=clock, restarts=restarts)
        self.fleet.set_prepare_hook(self.prepare_worker)
        # Supervised pools: profiles are checked here, so a bad one stops the start-up.
        self.supervisors = build_supervisors(config, self.fleet, is_ready=self.fleet.has_answered)
        self.discoveries: list[Discovery] = []
        self._upkeep = BackgroundLoop("shared-state")

    # ---- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        for pool, pool_config in self.config.pools.items():
            if pool_config.launch is None:
                discovery = self._discovery_factory(pool, pool_config, self.fleet)
                await discovery.start()
                self.discoveries.append(discovery)
        self.health.start()
        self.load_reports.start()
        self._upkeep.start(self._keep_in_step())
        for supervisor in self.supervisors:
            await supervisor.start()

    async def stop(self) -> None:
        """Stop admitting, let in-flight requests finish (the server drains them within
        its grace period before calling this), then stop everything we started."""
        self.shutting_down = True
        self.admission.close()
        for discovery in self.discoveries:
            await discovery.stop()
        await self._upkeep.stop()
        await self.health.stop()
        await self.load_reports.stop()
        await self.fleet.close()
        for supervisor in self.supervisors:
            await supervisor.stop()
        await self.transport.close()
        await self.control_client.aclose()

    # ---- request path -------------------------------------------------------------------
    def check_api_key(self, request: Request, listing: bool = False) -> str | None:
        """The key id (a digest prefix) of the request's API key, None when keys are off;
        raises AuthError 401/429 when keys are configured and this request fails them."""
        if listing and self.config.auth.open_listings:
            return None
        try:
            identity = self.api_keys.check(request.headers.get("authorization"))
            return identity.key_id if identity.authenticated else None
        except AuthError as exc:
            if exc.status == 429:
                sla = request.headers.get(SLA_CLASS_HEADER, SlaClass.BALANCED.value).strip().lower()
                label = sla if sla in SlaClass.__members__.values() else SlaClass.BALANCED.value
                self.metrics.rejections.labels(label, "rate_limited").inc()
            raise

    def check_admin(self, request: Request) -> None:
        self.admin_auth.check(request.headers.get("authorization"))

    async def read_json_body(self, request: Request) -> bytes:
        content_type = request.headers.get("content-type", "application/json").split(";", 1)[0].strip().lower()
        if content_type not in ("application/json", ""):
            raise ApiError(415, f"Content-Type must be application/json, not {content_type!r}.", code="unsupported_media_type")
        limit = self.config.server.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"Request body exceeds {limit} bytes.", code="payload_too_large")
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                raise ApiError(413, f"Request body exceeds {limit} bytes.", code="payload_too_large")
        return bytes(body)

    def prepare_worker_payload(self, speech: SpeechRequest) -> dict[str, Any]:
        if speech.model not in self._aliases:
            raise ApiError(
                404,
                f"The model '{speech.model}' does not exist; use {self.config.models.served_model_name} or one of its aliases.",
                param="model",
                code="model_not_found",
            )
        if speech.ref_audio is not None:
            self.ref_audio.check(speech.ref_audio)  # never let a client make a worker fetch any URL
        voice = self.resolve_voice(speech)
        return worker_payload(speech, self.config.models.served_model_name, voice)

    def resolve_voice(self, speech: SpeechRequest) -> str | None:
        return resolve_voice(speech.voice_name, self.config.voices, self.voices.store)

    def voice_listing(self) -> dict[str, Any]:
        return list_voices(self.config.voices, self.voices.store)

    def _voice_targets(self) -> list[Worker]:
        # Every worker that answers HTTP; a starting one gets the voices by replay anyway.
        return [w for w in self.fleet.workers if w.state in (WorkerState.READY, WorkerState.DRAINING, WorkerState.EJECTED)]

    async def prepare_worker(self, worker: Worker) -> None:
        """Before a worker becomes routable: every stored voice, then the warm-up."""
        report = await self.voices.replay(worker.url)
        if not report.ok:
            raise RuntimeError(f"voice replay incomplete: {report.error or report}")
        warmup = self._warmup_for(worker)
        if warmup is None or not warmup.enabled:
            return
        spec = self.fleet.specs[worker.pool]
        sizes = batch_sizes_for(worker.pool, warmup, spec.max_num_seqs)
        result = await warm_up(self.control_client, worker.url, self.config.models.served_model_name, warmup, sizes)
        log.info(result.summary(), extra={"worker": worker.worker_id, "pool": worker.pool.value})
        if not result.ok:
            raise RuntimeError(result.summary())

    async def _keep_in_step(self) -> None:
        """Background upkeep of state shared with workers and other gateway replicas.

        A worker that stayed up but missed a voice upload or delete (timeout, 5xx) would
        otherwise keep a stale voice list until its next restart, and a threshold or drain
        changed through another replica would only apply here after a restart.
        """
        last_voice_sync = 0.0
        while True:
            await asyncio.sleep(SHARED_STATE_INTERVAL_S)
            try:
                self._follow_shared_state()
                if self.voices.out_of_step and self._clock() - last_voice_sync >= VOICE_SYNC_INTERVAL_S:
                    last_voice_sync = self._clock()
                    await self.voices.reconcile()
            except Exception:
                log.exception("shared-state upkeep failed; retrying later")

    def _follow_shared_state(self) -> None:
        policy = self.thresholds.current().policy
        if self.thresholds.reload_if_changed():
            log.info("routing changed by another replica: %s", self.thresholds.current().model_dump())
            if self.thresholds.current().policy != policy:
                self.admission.set_policy(create_policy(self.thresholds.current().policy))
            self.admission.capacity_changed()
        self.fleet.reload_drained_if_changed()

    def _warmup_for(self, worker: Worker) -> WarmupConfig | None:
        """Supervised workers warm as ``launch.warmup`` says, others as ``pools.<pool>.warmup``;
        without it discovered workers get the defaults and static URLs none (their
        operator warms them; a restarted static worker is still replayed its voices)."""
        pool_config = self.config.pools.get(worker.pool)
        if pool_config.launch is not None:
            return pool_config.launch.warmup
        if pool_config.warmup is not None:
            return pool_config.warmup
        if pool_config.discovery.mode != "static":
            return WarmupConfig()
        return None

    def open_encoder(self, speech: SpeechRequest) -> StreamEncoder:
        return open_encoder(speech.response_format, speech.speed)

    def take_lease(self, decision: Decision) -> Lease:
        assert decision.worker_id is not None
        return self.fleet.lease(decision.worker_id)

    def retry_picker(self, info: RequestInfo) -> RetryPicker:
        def pick(tried: set[str]) -> tuple[Decision, Lease] | None:
            failed = self.fleet.get(next(iter(tried))) if tried else None
            worker = pick_retry_worker(self.fleet.snapshot(), tried, failed.pool if failed else None)
            if worker is None:
                return None
            decision = Decision(Action.ROUTE, RETRY_OTHER_WORKER, worker.pool, worker.worker_id)
            self.metrics.routing_decisions.labels(info.sla_class.value, worker.pool.value, RETRY_OTHER_WORKER).inc()
            return decision, self.fleet.lease(worker.worker_id)

        return pick

    def stream_failed(self, stream: OpenStream, kind: str, detail: str) -> None:
        worker = stream.lease.worker
        self.fleet.request_failed(worker, kind, detail, ejecting=True)
        self.metrics.upstream_errors.labels(worker.pool.value, kind).inc()

    def record_request(
        self,
        *,
        request_id: str,
        sla_class: SlaClass,
        pool: str | None,
        worker: str | None,
        reason: str | None,
        status: int,
        duration_s: float,
        ttfp_s: float | None,
        audio_s: float,
        disconnect_phase: str | None,
        speech: SpeechRequest | None = None,
        retries: int = 0,
        error: str | None = None,
        key_id: str | None = None,
    ) -> None:
        self.metrics.observe_request(
            sla_class=sla_class.value, pool=pool, status=status, duration_s=duration_s, ttfp_s=ttfp_s, audio_s=audio_s
        )
        if disconnect_phase is not None:
            self.metrics.client_disconnects.labels(disconnect_phase).inc()
        self.access_log.log(
            AccessRecord(
                request_id=request_id,
                sla_class=sla_class.value,
                status=status,
                duration_ms=duration_s * 1000,
                pool=pool,
                worker=worker,
                reason=reason,
                ttfp_ms=None if ttfp_s is None else ttfp_s * 1000,
                audio_s=audio_s,
                model=speech.model if speech else None,
                response_format=speech.response_format.value if speech else None,
                stream_format=speech.stream_format if speech else None,
                input_chars=len(speech.input) if speech else None,
                retries=retries,
                error=error,
                key_id=key_id,
                input_text=speech.input if speech and self.config.logging.log_input_text else None,
            )
        )

    # ---- admin ---------------------------------------------------------------------------
    def routing_status(self) -> dict[str, Any]:
        current = self.thresholds.current()
        view = self.fleet.snapshot()
        return {
            "policy": current.policy,
            "thresholds": current.thresholds.model_dump(),
            "effective": threshold_values(current.thresholds, low_latency_capacity=view.capacity(PoolName.LOW_LATENCY)),
            "persisted_at": str(self.thresholds.path),
        }

    def update_routing(self, patch: dict[str, Any]) -> None:
        before = self.thresholds.current()
        try:
            after = self.thresholds.update(patch)
        except ThresholdUpdateError as exc:
            raise bad_request(str(exc), code="invalid_routing_config") from exc
        if after.policy != before.policy:
            self.admission.set_policy(create_policy(after.policy))
        log.info(
            "routing changed by operator: %s",
            patch,
            extra={"before": before.model_dump(), "after": after.model_dump()},
        )
        self.admission.capacity_changed()

    def pools_status(self) -> dict[str, Any]:
        status = self.fleet.describe()
        status["queue_depths"] = {sla.value: depth for sla, depth in self.admission.queue_depths().items()}
        return status

    def config_document(self) -> dict[str, Any]:
        document = self.config.model_dump(mode="json")
        auth = document.get("auth", {})
        if auth.get("admin_token"):
            auth["admin_token"] = "**********"
        document["routing"] = self.thresholds.current().model_dump(mode="json")
        document["version"] = __version__
        return document

    # ---- metrics ---------------------------------------------------------------------------
    def fleet_snapshot(self) -> FleetSnapshot:
        now = self._clock()
        workers = [
            WorkerSnapshot(
                pool=w.pool.value,
                worker=w.worker_id,
                inflight=w.inflight,
                reported_load=w.reported_load,
                up=w.routable,
                report_age_s=None if w.reported_at is None else now - w.reported_at,
                slots=w.slots,
            )
            for w in self.fleet.workers
            if w.state is not WorkerState.STOPPED
        ]
        view = self.fleet.snapshot()
        availability = self.availability.current()
        return FleetSnapshot(
            workers=workers,
            queue_depths={sla.value: depth for sla, depth in self.admission.queue_depths().items()},
            thresholds=threshold_values(self.thresholds.thresholds(), low_latency_capacity=view.capacity(PoolName.LOW_LATENCY)),
            empty_pool_seconds=availability.empty_for_s,
            degraded=availability.degraded,
        )


class _AdmissionMetrics:
    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def on_queue_depth(self, sla_class: SlaClass, depth: int) -> None:
        pass  # the fleet collector reads queue depths at scrape time

    def on_wait(self, sla_class: SlaClass, seconds: float) -> None:
        self._metrics.admission_wait.labels(sla_class.value).observe(seconds)

    def on_rejected(self, sla_class: SlaClass, reason: str) -> None:
        self._metrics.rejections.labels(sla_class.value, reason).inc()

    def on_decision(self, sla_class: SlaClass, decision: Decision) -> None:
        if decision.pool is not None:
            self._metrics.routing_decisions.labels(sla_class.value, decision.pool.value, decision.reason).inc()


class _RelayMetrics:
    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def upstream_error(self, pool: str, kind: str) -> None:
        self._metrics.upstream_errors.labels(pool, kind).inc()

    def retried(self, reason: str) -> None:
        self._metrics.retries.labels(reason).inc()
