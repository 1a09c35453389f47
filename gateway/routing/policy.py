"""The one interface every routing policy implements, and the factory that builds them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.config import PolicyName, RoutingThresholds
from gateway.routing.adaptive import AdaptivePolicy
from gateway.routing.baselines import LeastLoadedPolicy, RoundRobinPolicy, SinglePoolPolicy
from gateway.routing.model import PolicyState
from gateway.routing.rules import RulesPolicy
from gateway.types import PoolName, reasons
from gateway.types.decision import Decision
from gateway.types.view import LoadView, RequestInfo


class RoutingPolicy(Protocol):
    """A pure function of its inputs: no I/O, no clock, no memory outside ``state``.

    ``decide`` answers ROUTE (a worker with a free slot), WAIT (admission queues the
    request and asks again when capacity changes) or REJECT. The returned state replaces
    the one passed in; the caller owns it.
    """

    name: str

    def decide(
        self, request: RequestInfo, view: LoadView, thresholds: RoutingThresholds, state: PolicyState
    ) -> tuple[Decision, PolicyState]: ...


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
