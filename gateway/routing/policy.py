"""The one interface every routing policy implements, and the factory that builds them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.config import PolicyName, RoutingThresholds
from gateway.routing.adaptive import AdaptivePolicy
from gateway.routing.baselines import LeastLoadedPolicy, RoundRobinPolicy, SinglePoolPolicy
from gateway.routing.rules import RulesPolicy
from gateway.types import PoolName, reasons
from gateway.types.decision import Decision
from gateway.types.view import LoadView, RequestInfo


class RoutingPolicy(Protocol):
    """No I/O, no clock: the answer depends on the request, the view, the thresholds and
    the policy's own memory (each policy owns its state: a tie rotation, a hysteresis mode).

    ``decide`` answers ROUTE (a worker with room), WAIT (admission queues the request and
    asks again when capacity changes) or REJECT. A request with ``tried`` workers is a
    retry after a failed first byte: it goes through the same stages, those excluded.
    """

    name: str

    def decide(self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds) -> Decision: ...


_FACTORIES: dict[str, Callable[[], RoutingPolicy]] = {
    "adaptive": AdaptivePolicy,
    "rules": RulesPolicy,
    "low_latency_only": lambda: SinglePoolPolicy(PoolName.LOW_LATENCY, reasons.LOW_LATENCY_ONLY),
    "high_throughput_only": lambda: SinglePoolPolicy(PoolName.HIGH_THROUGHPUT, reasons.HIGH_THROUGHPUT_ONLY),
    "round_robin": RoundRobinPolicy,
    "least_loaded": LeastLoadedPolicy,
}


def create_policy(name: PolicyName) -> RoutingPolicy:
    try:
        return _FACTORIES[name]()
    except KeyError:
        raise ValueError(f"unknown routing policy {name!r}; known: {', '.join(_FACTORIES)}") from None
