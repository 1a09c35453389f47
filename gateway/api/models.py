"""``GET /v1/models`` (OpenAI list) and ``GET /v1/audio/models``: the served model and its aliases."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.api.access import ApiKeyGate
from gateway.config import ModelsConfig

CREATED = 1_700_000_000  # a fixed timestamp: the list must not change between calls


def create_router(models: ModelsConfig, auth: ApiKeyGate) -> APIRouter:
    router = APIRouter()
    names = [models.served_model_name, *[a for a in models.aliases if a != models.served_model_name]]

    @router.get("/v1/models")
    async def list_models(request: Request) -> dict[str, Any]:
        await auth.check(request.headers, listing=True)
        data = [{"id": name, "object": "model", "created": CREATED, "owned_by": "higgs-gateway"} for name in names]
        return {"object": "list", "data": data}

    @router.get("/v1/audio/models")
    async def list_audio_models(request: Request) -> dict[str, Any]:
        await auth.check(request.headers, listing=True)
        return {"models": [{"id": name} for name in names]}

    return router
