"""The state backend's series, registered on the gateway's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "higgs_gateway_"


class StateMetrics:
    def __init__(self, registry: CollectorRegistry, backend: str) -> None:
        self.backend_up = Gauge(
            PREFIX + "state_backend_up",
            "1 while the state backend answers (always 1 for local); 0: serving from the last known state.",
            ["backend"],
            registry=registry,
        ).labels(backend)
        self.rate_limit_unavailable = Counter(
            PREFIX + "state_rate_limit_unavailable",
            "Keyed requests whose fleet-wide rate limit could not be checked, by the failure mode applied.",
            ["mode"],
            registry=registry,
        )
        self.changes_applied = Counter(
            PREFIX + "state_changes_applied",
            "Shared-state changes made through other replicas and applied here, by kind.",
            ["kind"],
            registry=registry,
        )
        self.backend_up.set(1 if backend == "local" else 0)
