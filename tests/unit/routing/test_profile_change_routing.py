"""A GPU that changed profile and back: `balanced` low load goes to low-latency again.

The fleet starts as 1 low-latency + 1 high-throughput worker, becomes 2 high-throughput
under sustained load (the low-latency worker leaves, its GPU runs a high-throughput one),
then changes back. Meanwhile the high-throughput workers learned that this hardware (here:
emulated workers four times faster than real time) beats the profiles' estimate 4x. The
low-latency worker that comes back has no samples and no peers; it must not be predicted at
the profile's estimate against its neighbour's learned curve, or it gets no traffic at all.
"""

from __future__ import annotations

import pytest

from gateway.config import RoutingThresholds
from gateway.worker.profile import load_deploy_profile
from gateway.routing.adaptive import AdaptivePolicy
from gateway.routing.performance import PerformanceModel
from gateway.routing.prior import prior_curve
from gateway.routing.view import routing_view
from gateway.types import PoolName, SlaClass, reasons
from gateway.types.observations import PaceSample, StreamObservation
from gateway.types.view import LoadView, RequestInfo, WorkerLoad

LL, HT = PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT
PRIORS = {
    LL: prior_curve(load_deploy_profile("higgs_multimodal_qwen3_low_latency")),
    HT: prior_curve(load_deploy_profile("higgs_multimodal_qwen3_high_throughput")),
}
SPEED = 0.25  # observed / estimated, for every profile on this hardware


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fleet(*workers: tuple[str, PoolName, int]) -> LoadView:
    return LoadView(tuple(WorkerLoad(w, pool, True, load, None, 64) for w, pool, load in workers))


def served(performance: PerformanceModel, worker_id: str, pool: PoolName, load: int) -> None:
    prior = PRIORS[pool]
    pace = tuple(PaceSample(load, 25, 25 * prior.step(load) * SPEED) for _ in range(8))
    performance.on_stream_done(StreamObservation(worker_id, pool, load, prior.ttfp(load) * SPEED, pace))


def learned_after(performance: PerformanceModel, clock: Clock, workers: LoadView, streams: int) -> None:
    performance.track(workers)
    performance.refit()
    for index in range(streams):
        for worker in workers.workers:
            served(performance, worker.worker_id, worker.pool, 1 + index % worker_cap(worker.pool))
        clock.now += 0.2
    performance.refit()


def worker_cap(pool: PoolName) -> int:
    return PRIORS[pool].max_load


@pytest.mark.parametrize("low_latency_load", [0, 1, 2, 3])
def test_low_load_goes_to_the_low_latency_worker_that_came_back(low_latency_load: int) -> None:
    clock = Clock()
    performance = PerformanceModel(priors=PRIORS, clock=clock)
    learned_after(performance, clock, fleet(("low_latency-0", LL, 0), ("high_throughput-0", HT, 0)), 100)
    learned_after(performance, clock, fleet(("high_throughput-0", HT, 0), ("high_throughput-1", HT, 0)), 300)
    back = fleet(("high_throughput-0", HT, 0), ("low_latency-0", LL, low_latency_load))
    performance.track(back)
    performance.refit()
    thresholds = RoutingThresholds()
    view = routing_view(back, performance.snapshot(), thresholds)
    decision = AdaptivePolicy().decide(RequestInfo(SlaClass.BALANCED, None, 100, False), view, thresholds)
    assert (decision.pool, decision.reason) == (LL, reasons.FASTEST_FINISH)
    # Predicted as the profile's estimate at this hardware's speed, like the worker it replaced.
    assert decision.predicted_rtf == pytest.approx(PRIORS[LL].rtf(low_latency_load + 1) * SPEED, rel=0.1)
