"""Operator routes: routing policy and thresholds (live), pools, drain, the effective config.

All of them need ``Authorization: Bearer <admin token>``; without a configured token they
do not exist (404), so a gateway is never left with an open control plane by accident.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request

from gateway.api.errors import ApiError, bad_request

if TYPE_CHECKING:
    from gateway.runtime import Gateway

log = logging.getLogger("higgs_gateway.admin")
router = APIRouter(prefix="/admin")


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    gateway.check_admin(request)
    return gateway


@router.get("/routing")
async def get_routing(request: Request) -> dict[str, Any]:
    return _gateway(request).routing_status()


@router.patch("/routing")
async def patch_routing(request: Request) -> dict[str, Any]:
    gateway = _gateway(request)
    try:
        patch = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"Body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(patch, dict):
        raise bad_request("Body must be a JSON object like {\"thresholds\": {...}}.", code="invalid_json")
    await gateway.update_routing(patch)
    return gateway.routing_status()


@router.get("/pools")
async def get_pools(request: Request) -> dict[str, Any]:
    return _gateway(request).pools_status()


@router.post("/workers/{worker_id}/drain")
async def drain(worker_id: str, request: Request) -> dict[str, Any]:
    return await _set_drained(_gateway(request), worker_id, True)


@router.post("/workers/{worker_id}/undrain")
async def undrain(worker_id: str, request: Request) -> dict[str, Any]:
    return await _set_drained(_gateway(request), worker_id, False)


async def _set_drained(gateway: Gateway, worker_id: str, drained: bool) -> dict[str, Any]:
    if gateway.fleet.get(worker_id) is None:
        raise ApiError(404, f"No worker with id {worker_id!r}; see GET /admin/pools.", param="worker_id", code="worker_not_found")
    worker = await gateway.shared.set_drained(worker_id, drained)
    return {"id": worker.worker_id, "drained": worker.drained, "inflight": worker.inflight, "state": worker.state.value}


@router.get("/config")
async def get_config(request: Request) -> dict[str, Any]:
    return _gateway(request).config_document()
