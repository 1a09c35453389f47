"""``/health`` (the process is alive), ``/ready`` (it can serve), ``/metrics``."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast, get_args

import orjson
from fastapi import APIRouter, Request

from gateway.api.errors import ApiError
from gateway.pools.availability import ReadyRequires
from starlette.responses import Response

if TYPE_CHECKING:
    from gateway.runtime import Gateway

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "healthy"}


@router.get("/ready")
async def ready(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    state = gateway.availability.current()
    # ?require=every_pool: the strict answer for tools that need the whole fleet (a
    # benchmark before it starts), whatever the gateway's own readiness setting.
    asked = request.query_params.get("require", gateway.config.server.ready_requires)
    if asked not in get_args(ReadyRequires):
        raise ApiError(400, "require must be any_pool or every_pool.", param="require", code="invalid_value")
    requires = cast(ReadyRequires, asked)
    is_ready = state.ready_for(requires) and not gateway.shutting_down
    body = {
        "status": ("degraded" if state.degraded else "ready") if is_ready else "not_ready",
        "degraded": state.degraded,
        "routable_workers": state.routable,
        "empty_pools": state.empty_pools,
        "empty_since": state.empty_since,  # pool -> Unix time it lost its last routable worker
        "empty_for_s": state.empty_for_s,
        "ready_requires": requires,
        "shutting_down": gateway.shutting_down,
    }
    return Response(orjson.dumps(body), status_code=200 if is_ready else 503, media_type="application/json")


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    payload, content_type = gateway.metrics.render(request.headers.get("accept"))
    return Response(payload, media_type=content_type)
