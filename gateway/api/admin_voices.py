"""``/admin/voices``: every owner's voices, for the operator.

The admin lists every voice with its owner (a key id or ``admin``), deletes
any of them, and uploads the admin's own: the house voices that ``voices.aliases`` hand
to every caller. Here, unlike ``/v1/audio/voices``, responses name the workers.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.api.voice_upload import read_voice_upload, upload_body_limit
from gateway.config import VoicesConfig
from gateway.security.admin import AdminAuth
from gateway.voices.errors import VoiceError
from gateway.voices.owners import ADMIN, is_valid_owner
from gateway.voices.registry import VoiceRegistry


def create_router(
    voices_config: VoicesConfig, max_body_bytes: int, admin_auth: AdminAuth, voices: VoiceRegistry,
    body_timeout_s: float | None = None,
) -> APIRouter:
    router = APIRouter(prefix="/admin")
    limit = voices_config.max_upload_bytes
    body_limit = upload_body_limit(limit, max_body_bytes)

    def check(request: Request) -> None:
        admin_auth.check(request.headers.get("authorization"))

    @router.get("/voices")
    async def list_voices(request: Request) -> dict[str, Any]:
        check(request)
        listed = [
            {"id": v.name, "owner": v.owner, "worker_name": v.worker_name, **v.public()} for v in voices.store.list()
        ]
        return {"voices": listed, "out_of_step": sorted(voices.out_of_step)}

    @router.post("/voices")
    async def upload_voice(request: Request) -> dict[str, Any]:
        check(request)
        upload = await read_voice_upload(request, limit, body_limit, body_timeout_s)
        result = await upload.register(voices, owner=ADMIN)
        voice = result.voice
        return {"success": True, "voice": {"id": voice.name, "owner": voice.owner, **voice.public()}, "workers": result.summary()}

    @router.delete("/voices/{owner}/{name}")
    async def delete_voice(owner: str, name: str, request: Request) -> dict[str, Any]:
        check(request)
        if not is_valid_owner(owner):
            raise VoiceError(f"No voice named {name!r} is registered.", status=404, code="voice_not_found")
        result = await voices.delete(name, owner=owner)
        return {"success": True, "deleted": result.voice.name, "owner": owner, "workers": result.summary()}

    return router
