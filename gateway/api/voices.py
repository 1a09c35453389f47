"""``/v1/audio/voices``: one voice list for the whole fleet.

An upload is stored durably by the gateway first, then pushed to every worker of both
pools; a worker that is down gets it when it comes back (voices are replayed before a
worker becomes routable), so a voice is usable through any pool.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.datastructures import UploadFile

from gateway.api.access import ApiKeyGate
from gateway.config import VoicesConfig
from gateway.errors import GatewayError, bad_request
from gateway.voices.registry import VoiceRegistry
from gateway.voices.resolve import list_voices as voice_listing


def create_router(voices_config: VoicesConfig, max_body_bytes: int, auth: ApiKeyGate, voices: VoiceRegistry) -> APIRouter:
    router = APIRouter()
    limit = voices_config.max_upload_bytes

    @router.get("/v1/audio/voices")
    async def list_voices(request: Request) -> dict[str, Any]:
        await auth.check(request.headers, listing=True)
        return voice_listing(voices_config, voices.store)

    @router.post("/v1/audio/voices")
    async def upload_voice(request: Request) -> dict[str, Any]:
        await auth.check(request.headers)
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            raise GatewayError(
                415, "Upload voices as multipart/form-data with fields name, audio_sample and consent.",
                code="unsupported_media_type",
            )  # fmt: skip
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise GatewayError(413, f"Upload exceeds {limit} bytes of audio.", param="audio_sample", code="payload_too_large")
        try:
            form = await request.form(max_files=1, max_fields=8, max_part_size=limit + 1)
        except Exception as exc:  # malformed multipart or a part over the limit
            raise bad_request(f"Could not read the multipart form: {exc}", code="invalid_form") from exc
        sample = form.get("audio_sample")
        if not isinstance(sample, UploadFile):
            raise bad_request("Missing file field 'audio_sample'.", "audio_sample", code="missing_required_parameter")
        audio = await sample.read(limit + 1)
        if len(audio) > limit:
            raise GatewayError(413, f"audio_sample exceeds {limit} bytes.", param="audio_sample", code="payload_too_large")
        name = form.get("name")
        if not isinstance(name, str) or not name:
            raise bad_request("Missing field 'name'.", "name", code="missing_required_parameter")
        result = await voices.add(
            name,
            audio,
            consent=form.get("consent"),
            ref_text=form.get("ref_text"),
            speaker_description=form.get("speaker_description"),
        )
        return {"success": True, "voice": {"id": result.voice.name, **result.voice.public()}, "workers": result.summary()}

    @router.delete("/v1/audio/voices/{name}")
    async def delete_voice(name: str, request: Request) -> dict[str, Any]:
        await auth.check(request.headers)
        result = await voices.delete(name)
        return {"success": True, "deleted": result.voice.name, "workers": result.summary()}

    return router
