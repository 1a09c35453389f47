"""Operator routes: routing policy and thresholds (live), pools, drain, the fleet at a glance,
the fleet planner's reasoning, the effective config.

All of them need ``Authorization: Bearer <admin token>``; without a configured token they
do not exist (404), so a gateway is never left with an open control plane by accident.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson
from fastapi import APIRouter, Request

from gateway import __version__
from gateway.config import GatewayConfig
from gateway.config_check import redacted
from gateway.errors import GatewayError, bad_request
from gateway.planner.planner import FleetPlanner
from gateway.pools.availability import PoolAvailability
from gateway.pools.drains import DrainStore
from gateway.pools.members import Members
from gateway.pools.view import FleetView
from gateway.routing.admission import Admission
from gateway.routing.control import RoutingControl
from gateway.routing.performance import PerformanceModel
from gateway.routing.thresholds import ThresholdStore
from gateway.security.admin import AdminAuth


def create_router(
    config: GatewayConfig,
    admin_auth: AdminAuth,
    routing: RoutingControl,
    thresholds: ThresholdStore,
    fleet: FleetView,
    members: Members,
    drains: DrainStore,
    admission: Admission,
    performance: PerformanceModel | None = None,
    *,
    availability: PoolAvailability | None = None,
    decision_totals: Callable[[], Mapping[tuple[str, str], float]] = dict,
    planner: FleetPlanner | None = None,
    profile_changes: Callable[[], dict[str, Any]] | None = None,
) -> APIRouter:
    router = APIRouter(prefix="/admin")

    def check(request: Request) -> None:
        admin_auth.check(request.headers.get("authorization"))

    @router.get("/routing")
    async def get_routing(request: Request) -> dict[str, Any]:
        check(request)
        return routing.status()

    @router.patch("/routing")
    async def patch_routing(request: Request) -> dict[str, Any]:
        check(request)
        try:
            patch = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"Body is not valid JSON: {exc}", code="invalid_json") from exc
        if not isinstance(patch, dict):
            raise bad_request("Body must be a JSON object like {\"thresholds\": {...}}.", code="invalid_json")
        await routing.update(patch)
        return routing.status()

    @router.get("/pools")
    async def get_pools(request: Request) -> dict[str, Any]:
        check(request)
        status = fleet.describe()
        if performance is not None:
            # Each worker's learned curve next to its prior (docs/routing.md: reading the curves).
            for pool in status["pools"].values():  # type: ignore[union-attr]
                for worker in pool["workers"]:  # type: ignore[index]
                    worker["curve"] = performance.describe(worker["id"])
        status["queue_depths"] = {sla.value: depth for sla, depth in admission.queue_depths().items()}
        return status

    @router.get("/fleet")
    async def get_fleet(request: Request) -> dict[str, Any]:
        """What the playground's fleet panel shows, as JSON: workers, queues, whether each
        pool can serve, routing decisions so far by pool and reason, profile changes."""
        check(request)
        status = fleet.describe()
        status["queue_depths"] = {sla.value: depth for sla, depth in admission.queue_depths().items()}
        if availability is not None:
            pools = availability.current()
            status["availability"] = {
                "status": pools.status,
                "routable_workers": pools.routable,
                "empty_pools": pools.empty_pools,
            }
        status["decisions"] = [
            {"pool": pool, "reason": reason, "count": count}
            for (pool, reason), count in sorted(decision_totals().items())
            if count > 0
        ]
        # GPUs moving between pools (supervisor.profile_changes): pending, in progress, recent.
        status["profile_changes"] = profile_changes() if profile_changes is not None else {"enabled": False}
        return status

    @router.get("/planner")
    async def get_planner(request: Request) -> dict[str, Any]:
        """The fleet planner's last pass: its inputs, the mixes it tried and why this one."""
        check(request)
        if planner is None:
            raise GatewayError(404, "The fleet planner is not part of this gateway.", code="planner_not_configured")
        return planner.describe()

    async def set_drained(worker_id: str, drained: bool) -> dict[str, Any]:
        if members.get(worker_id) is None:
            raise GatewayError(
                404, f"No worker with id {worker_id!r}; see GET /admin/pools.", param="worker_id", code="worker_not_found"
            )
        # Persisted first (the shared store, if any, before this replica's copy): survives a
        # restart, other replicas follow; a shared store out of reach refuses it (503).
        await drains.change(worker_id, drained)
        worker = members.set_drained(worker_id, drained)
        return {"id": worker.worker_id, "drained": worker.drained, "inflight": worker.inflight, "state": worker.state.value}

    @router.post("/workers/{worker_id}/drain")
    async def drain(worker_id: str, request: Request) -> dict[str, Any]:
        check(request)
        return await set_drained(worker_id, True)

    @router.post("/workers/{worker_id}/undrain")
    async def undrain(worker_id: str, request: Request) -> dict[str, Any]:
        check(request)
        return await set_drained(worker_id, False)

    @router.get("/config")
    async def get_config(request: Request) -> dict[str, Any]:
        check(request)
        document = redacted(config)
        document["routing"] = thresholds.current().model_dump(mode="json")
        document["version"] = __version__
        return document

    return router
