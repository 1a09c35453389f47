"""``/health`` (the process is alive), ``/ready`` (every pool can serve), ``/metrics``."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.metrics import GatewayMetrics
from gateway.pools.fleet import Fleet
from gateway.routing.admission import Admission
from gateway.types import PoolName


def create_router(fleet: Fleet, admission: Admission, metrics: GatewayMetrics) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "healthy"}

    @router.get("/ready")
    async def ready() -> Response:
        routable = {pool.value: fleet.routable_count(pool) for pool in PoolName}
        empty = sorted(pool for pool, count in routable.items() if count == 0)
        shutting_down = admission.closed
        is_ready = not empty and not shutting_down
        body = {
            "status": "ready" if is_ready else "not_ready",
            "routable_workers": routable,
            "empty_pools": empty,
            "shutting_down": shutting_down,
        }
        return Response(orjson.dumps(body), status_code=200 if is_ready else 503, media_type="application/json")

    @router.get("/metrics")
    async def metrics_route(request: Request) -> Response:
        payload, content_type = metrics.render(request.headers.get("accept"))
        return Response(payload, media_type=content_type)

    return router
