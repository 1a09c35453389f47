"""Simulated workers and the gateway in front of them, on the virtual-time loop.

Workers are the emulator's own engines (the same timing model and deploy profiles as
``higgs-gateway emulate``), warmed like a supervised worker. The gateway side is the real
thing wherever routing is concerned: ``Admission``, the policy, the performance model
learning from what ``PaceMeter`` measures, ``routing_view``. What it leaves out is HTTP:
requests go straight to the engine, and audio comes back as chunk events at the times the
engine says, so a simulated TTFP lacks the gateway's own ~2 ms per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.bench.client import RequestResult, RequestSpec
from gateway.bench.stats import worst_underrun
from gateway.config import AdmissionConfig, LearningSettings, PolicyName, RoutingConfig, RoutingThresholds
from gateway.deploy_profile import load_deploy_profile
from gateway.emulator.clock import ScaledClock
from gateway.emulator.driver import EngineDriver
from gateway.emulator.engine import Engine, EngineRequest
from gateway.pools.specs import default_slots
from gateway.routing import core as routing_core
from gateway.routing.admission import AdmissionRejected
from gateway.routing.core import RoutingCore
from gateway.routing.policy import RoutingPolicy, create_policy
from gateway.routing.prior import prior_curve
from gateway.types import PoolName, SlaClass
from gateway.types.codec import BYTES_PER_FRAME
from gateway.types.observations import StreamObservation
from gateway.types.view import LoadView, RequestInfo, WorkerLoad
from gateway.upstream.pace import PaceMeter
from gateway.worker_timing import StepModel, TimingParams


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """One simulated worker: its pool, profile and how fast its GPU is (1.0 = the model)."""

    pool: PoolName
    profile: str
    speed: float = 1.0
    slots_per_worker: int | None = None


class SimWorker:
    def __init__(self, worker_id: str, plan: WorkerPlan, loop: asyncio.AbstractEventLoop) -> None:
        self.worker_id = worker_id
        self.pool = plan.pool
        profile = load_deploy_profile(plan.profile)
        self.profile = profile
        self.model = StepModel(profile, TimingParams())
        # A slower GPU: its model time runs ``speed`` times as fast as the loop's.
        # Model time counts from the loop's zero, whenever the worker joins: a worker added
        # mid-run (an elastic fleet) converts between the two without rounding, which a
        # virtual-time loop needs (a wake-up a rounding error early would never come).
        clock = ScaledClock(1.0 / plan.speed, wall=loop.time, origin=0.0)
        captured = range(1, self.model.max_num_seqs + 1) if self.model.lazy_mlp_graph else ()
        self.driver = EngineDriver(Engine(self.model, clock, precaptured=captured), clock)
        self.slots = default_slots(plan.pool, plan.slots_per_worker, self.model.max_num_seqs)
        self.inflight = 0
        self.routable = True  # False while provisioning or draining (an elastic fleet)
        self._ids = 0

    def request(self, text: str) -> EngineRequest:
        self._ids += 1
        model = self.model
        return EngineRequest(
            request_id=f"{self.worker_id}-{self._ids}",
            prompt_tokens=model.prompt_tokens_for(text),
            total_frames=model.frames_for(text),
            overhead_seconds=model.overhead_seconds(),
        )


class SimSlot:
    """The simulator's lease: one place on a simulated worker, released once."""

    __slots__ = ("worker", "_on_release", "_released")

    def __init__(self, worker: SimWorker, on_release: Callable[[], None]) -> None:
        worker.inflight += 1
        self.worker = worker
        self._on_release = on_release
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self.worker.inflight -= 1
        self._on_release()


class SimGateway:
    """Admission + policy + learning over simulated workers; a ``SpeechClient`` for the bench."""

    def __init__(
        self,
        plans: Sequence[WorkerPlan],
        policy: PolicyName | RoutingPolicy = "adaptive",
        thresholds: RoutingThresholds | None = None,
        admission: AdmissionConfig | None = None,
        learning: LearningSettings | None = None,
        on_arrival: Callable[[RequestInfo], None] | None = None,
        workers: dict[str, SimWorker] | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.thresholds = thresholds or RoutingThresholds()
        # ``workers``: the same simulated workers behind several gateway replicas (replicas.py).
        self.workers: dict[str, SimWorker] = {} if workers is None else workers
        if workers is None:
            for index, plan in enumerate(plans):
                worker = SimWorker(f"{plan.pool.value}-{index}", plan, self._loop)
                self.workers[worker.worker_id] = worker
        self.on_slot_released: Callable[[], None] = lambda: self.admission.capacity_changed()
        priors = {w.pool: prior_curve(w.profile) for w in self.workers.values()}
        # Built as the gateway builds it (its live thresholds this object's, read at each decision).
        self.routing: RoutingCore[SimSlot] = routing_core.build(
            RoutingConfig(thresholds=self.thresholds, learning=learning or LearningSettings()),
            admission or AdmissionConfig(),
            self.loads,
            self.reserve,
            self._loop.time,
            priors=priors,
            any_routable=lambda: bool(self.workers),
            thresholds=lambda: self.thresholds,
            policy=create_policy(policy) if isinstance(policy, str) else policy,
        )
        self.performance, self.admission = self.routing.performance, self.routing.admission
        if on_arrival is not None:
            self.admission.count_arrivals(on_arrival)
        # The background refit, as in the gateway (it ends with the simulation's loop).
        self._learning = self._loop.create_task(self.performance.run(self.loads), name="learning")

    def reserve(self, worker_id: str) -> SimSlot:
        return SimSlot(self.workers[worker_id], self.on_slot_released)

    def loads(self) -> LoadView:
        return LoadView(tuple(
            WorkerLoad(w.worker_id, w.pool, w.routable, w.inflight, None, w.slots) for w in self.workers.values()
        ))  # fmt: skip

    async def speak(self, spec: RequestSpec, phase_start: float) -> RequestResult:
        now = self._loop.time
        result = RequestResult(spec.sla_class.value if spec.sla_class else None, len(spec.text), 0.0)
        sent = now()
        result.sent_s = sent - phase_start
        sla = spec.sla_class
        request = RequestInfo(sla or SlaClass.BALANCED, None, len(spec.text))
        try:
            reservation = await self.admission.admit(request)
        except AdmissionRejected as exc:
            result.status, result.error = exc.status, f"http_{exc.status}"
            result.e2e_s = now() - sent
            return result
        decision, worker = reservation.decision, reservation.slot.worker  # the slot is already held
        engine_request = worker.request(spec.text)
        dispatch_load, dispatched_at = worker.inflight, now()
        pace = PaceMeter(now, lambda: worker.inflight)  # what the relay measures, the same way
        try:
            events = worker.driver.submit(engine_request)
            result.status, result.pool = 200, worker.pool.value
            while True:
                event = await events.get()
                size = event.frames * BYTES_PER_FRAME
                at = now()
                pace.add(size)
                if result.ttfp_s is None:
                    result.ttfp_s = at - sent
                result.chunks.append((at - sent, size))
                result.pcm_bytes += size
                if event.final:
                    break
        finally:
            worker.driver.release(engine_request)
            reservation.release()  # wakes admission's queue, as the fleet's lease does
        ttfp = None if pace.first_at is None else pace.first_at - dispatched_at
        self.performance.on_stream_done(StreamObservation(
            worker.worker_id, worker.pool, dispatch_load, ttfp, tuple(pace.samples), bytes=pace.bytes,
            predicted_ttfp_s=decision.predicted_ttfp_s, predicted_rtf=decision.predicted_rtf,
        ))  # fmt: skip
        result.e2e_s = now() - sent
        result.underrun_s = worst_underrun(result.chunks)
        result.chunks = []
        return result

    async def close(self) -> None:
        """Phases share one gateway (as they share one real one); nothing to close per phase."""
