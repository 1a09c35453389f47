"""``GET /v1/models`` (OpenAI list) and ``GET /v1/audio/models``: the served model and its aliases."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

if TYPE_CHECKING:
    from gateway.runtime import Gateway

router = APIRouter()
CREATED = 1_700_000_000  # a fixed timestamp: the list must not change between calls


def _names(gateway: Gateway) -> list[str]:
    models = gateway.config.models
    return [models.served_model_name, *[a for a in models.aliases if a != models.served_model_name]]


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    gateway: Gateway = request.app.state.gateway
    await gateway.check_api_key(request, listing=True)
    data = [{"id": name, "object": "model", "created": CREATED, "owned_by": "higgs-gateway"} for name in _names(gateway)]
    return {"object": "list", "data": data}


@router.get("/v1/audio/models")
async def list_audio_models(request: Request) -> dict[str, Any]:
    gateway: Gateway = request.app.state.gateway
    await gateway.check_api_key(request, listing=True)
    return {"models": [{"id": name} for name in _names(gateway)]}
