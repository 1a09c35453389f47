"""``/v1/audio/voices``: each caller's own voices, usable through the whole fleet.

An upload is stored durably by the gateway first, then pushed to every worker of both
pools; a worker that is down gets it when it comes back (voices are replayed before a
worker becomes routable), so a voice is usable through any pool.

A voice belongs to the key that uploaded it (``gateway.voices.owners``): a caller lists,
uses and deletes only its own, and another key's voice answers 404 like a name nobody
registered, so a key cannot even learn that it exists. Responses say how many workers
took a change, never which ones (worker ids are the admin API's, ``/admin/voices``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.api.access import ApiKeyGate, voice_owner
from gateway.api.voice_upload import read_voice_upload, upload_body_limit
from gateway.config import AuthConfig, VoicesConfig
from gateway.security.auth import KeyIdentity
from gateway.voices.owners import NOBODY
from gateway.voices.registry import VoiceRegistry
from gateway.voices.resolve import list_voices as voice_listing


def create_router(
    voices_config: VoicesConfig, auth_config: AuthConfig, max_body_bytes: int, auth: ApiKeyGate, voices: VoiceRegistry,
    body_timeout_s: float | None = None,
) -> APIRouter:
    router = APIRouter()
    limit = voices_config.max_upload_bytes
    body_limit = upload_body_limit(limit, max_body_bytes)

    def quota(key: KeyIdentity | None) -> int | None:
        # Read per call: tiers changed at run time apply at once. No key, no tier quota.
        return auth_config.tier(key.tier).max_voices if key is not None and key.authenticated else None

    @router.get("/v1/audio/voices")
    async def list_voices(request: Request) -> dict[str, Any]:
        if auth.open_listings:
            key = auth.identify(request.headers)
            if key is None:  # no key sent: no one's voices (they hold consent records, transcripts)
                return voice_listing(voices_config, voices.store, owner=NOBODY)
        else:
            key = await auth.check(request.headers)
        return voice_listing(voices_config, voices.store, owner=voice_owner(key))

    @router.post("/v1/audio/voices")
    async def upload_voice(request: Request) -> dict[str, Any]:
        key = await auth.check(request.headers)
        upload = await read_voice_upload(request, limit, body_limit, body_timeout_s)
        result = await upload.register(voices, owner=voice_owner(key), owner_limit=quota(key))
        return {"success": True, "voice": {"id": result.voice.name, **result.voice.public()}, "workers": result.counts()}

    @router.delete("/v1/audio/voices/{name}")
    async def delete_voice(name: str, request: Request) -> dict[str, Any]:
        key = await auth.check(request.headers)
        result = await voices.delete(name, owner=voice_owner(key))
        return {"success": True, "deleted": result.voice.name, "workers": result.counts()}

    return router
