"""``/health`` (the process is alive), ``/ready`` (it can serve), ``/metrics``."""

from __future__ import annotations

from typing import cast, get_args

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.config import ReadyRequires
from gateway.errors import bad_request
from gateway.metrics import GatewayMetrics
from gateway.pools.availability import PoolAvailability
from gateway.routing.admission import Admission


def create_router(
    availability: PoolAvailability, admission: Admission, metrics: GatewayMetrics, ready_requires: ReadyRequires
) -> APIRouter:
    router = APIRouter()

    @router.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "healthy"}

    @router.get("/ready")
    async def ready(request: Request) -> Response:
        state = availability.current()
        # ?require=every_pool: the strict answer for tools that need the whole fleet (a
        # benchmark before it starts), whatever the gateway's own readiness setting.
        asked = request.query_params.get("require", ready_requires)
        if asked not in get_args(ReadyRequires):
            raise bad_request("require must be any_pool or every_pool.", param="require")
        requires = cast(ReadyRequires, asked)
        shutting_down = admission.closed
        is_ready = state.ready_for(requires) and not shutting_down
        body = {
            "status": ("degraded" if state.degraded else "ready") if is_ready else "not_ready",
            "degraded": state.degraded,
            "routable_workers": state.routable,
            "empty_pools": state.empty_pools,
            "empty_since": state.empty_since,  # pool -> Unix time it lost its last routable worker
            "empty_for_s": state.empty_for_s,
            "ready_requires": requires,
            "shutting_down": shutting_down,
        }
        return Response(orjson.dumps(body), status_code=200 if is_ready else 503, media_type="application/json")

    @router.get("/metrics")
    async def metrics_route(request: Request) -> Response:
        payload, content_type = metrics.render(request.headers.get("accept"))
        return Response(payload, media_type=content_type)

    return router
