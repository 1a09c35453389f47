"""``/health`` (the process is alive), ``/ready`` (every pool can serve), ``/metrics``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.types import PoolName

if TYPE_CHECKING:
    from gateway.runtime import Gateway

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "healthy"}


@router.get("/ready")
async def ready(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    routable = {pool.value: gateway.fleet.routable_count(pool) for pool in PoolName}
    empty = sorted(pool for pool, count in routable.items() if count == 0)
    is_ready = not empty and not gateway.shutting_down
    body = {
        "status": "ready" if is_ready else "not_ready",
        "routable_workers": routable,
        "empty_pools": empty,
        "shutting_down": gateway.shutting_down,
    }
    return Response(orjson.dumps(body), status_code=200 if is_ready else 503, media_type="application/json")


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    payload, content_type = gateway.metrics.render(request.headers.get("accept"))
    return Response(payload, media_type=content_type)
