"""Gateway config documents for benchmark runs over static (emulated) workers.

The gateway's own time knobs are wall-clock; when the workers run at a time scale, the
ones that shape routing (queue budgets, admission waits) are scaled too, so the gateway
behaves against the emulated fleet as it would against real workers in modelled time.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from gateway.bench.fleet import HT_PROFILE, LL_PROFILE
from gateway.config import AdmissionConfig, GatewayConfig, RoutingThresholds


def gateway_document(
    port: int,
    data_dir: Path,
    ll_workers: Sequence[str],
    ht_workers: Sequence[str],
    policy: str,
    time_scale: float = 1.0,
    ll_slots: int | None = None,
    admin_token: str | None = None,
    sessions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    thresholds, admission = RoutingThresholds(), AdmissionConfig()
    document: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port},
        "pools": {
            "low_latency": {"profile": LL_PROFILE, "workers": list(ll_workers)},
            "high_throughput": {"profile": HT_PROFILE, "workers": list(ht_workers)},
        },
        "routing": {
            "policy": policy,
            "thresholds": {"latency_queue_budget_ms": thresholds.latency_queue_budget_ms * time_scale},
        },
        "admission": {
            "max_wait_s": {name: wait * time_scale for name, wait in admission.max_wait_s.items()},
            "promote_after_s": admission.promote_after_s * time_scale,
        },
        # Per-request log lines cost CPU on the hot path; the benchmark measures routing.
        "logging": {"access_log": False, "level": "WARNING"},
        "data_dir": str(data_dir),
    }
    if ll_slots is not None:
        document["pools"]["low_latency"]["slots_per_worker"] = ll_slots
    if admin_token:
        document["auth"] = {"admin_token": admin_token}
    if sessions:
        document["sessions"] = dict(sessions)
    GatewayConfig(**document)  # fail here, with the key path, rather than in the child process
    return document


def write_config(document: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path
