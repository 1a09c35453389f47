"""The routing core, assembled in one place: the gateway, the simulator, the decision
benchmark and the tests all build it here, so none can wire it differently.

The parts that must agree are joined here once: admission tells the ``LatencyDemand`` of
every `latency` arrival and the performance model's refit turns that demand into the
latency reserve it publishes; the view the policy decides on is the fleet's loads with
that same model's curves and the live thresholds' caps attached.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic

from gateway.config import AdmissionConfig, RoutingConfig, RoutingThresholds
from gateway.routing.admission import Admission, Clock
from gateway.routing.performance import PerformanceModel
from gateway.routing.policy import RoutingPolicy, create_policy
from gateway.routing.reserve import LatencyDemand
from gateway.routing.view import RoutingSnapshot
from gateway.types import PoolName
from gateway.types.curve import Curve
from gateway.types.reservation import SlotT
from gateway.types.view import LoadView


@dataclass(frozen=True, slots=True)
class RoutingCore(Generic[SlotT]):
    admission: Admission[SlotT]
    performance: PerformanceModel  # learns from the recorder's stream observations; ``run`` refits
    snapshot: RoutingSnapshot  # the view the policy decides on
    demand: LatencyDemand


def build(
    config: RoutingConfig,
    admission: AdmissionConfig,
    loads: Callable[[], LoadView],
    reserve: Callable[[str], SlotT],
    clock: Clock,
    *,
    priors: Mapping[PoolName, Curve],
    any_routable: Callable[[], bool],
    thresholds: Callable[[], RoutingThresholds] | None = None,
    policy: RoutingPolicy | None = None,
    confirm: Callable[[SlotT], Awaitable[bool]] | None = None,
) -> RoutingCore[SlotT]:
    """``config``: the policy, learning and thresholds to start from; ``thresholds``: where
    the live ones are read (the gateway's store, changed at run time), else ``config``'s.
    ``reserve`` takes a slot on a worker (the fleet's lease); ``policy`` an already built
    one (a test's, a tool's) instead of ``config.policy``; ``confirm``: with replicas
    sharing a fleet view, whether a held slot is ours fleet-wide."""
    live = thresholds if thresholds is not None else lambda: config.thresholds
    demand = LatencyDemand()
    performance = PerformanceModel(config.learning, clock, priors, demand)
    snapshot = RoutingSnapshot(loads, performance, live)
    gate: Admission[SlotT] = Admission(
        admission,
        policy if policy is not None else create_policy(config.policy),
        thresholds=live,
        snapshot=snapshot,
        reserve=reserve,
        any_routable=any_routable,
        clock=clock,
        demand=demand,
        confirm=confirm,
    )
    return RoutingCore(gate, performance, snapshot, demand)
