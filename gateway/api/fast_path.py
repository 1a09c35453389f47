"""The speech route's entry: ``POST /v1/audio/speech`` straight to the speech pipeline.

The speech route is the hot path: ``api.entry.Entry`` hands it here without the framework
(the pipeline renders its own errors). The same endpoint is also a framework route, which
only documents it and answers other methods on the path (``speech_route``).
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.api.entry import id_header
from gateway.api.speech import SPEECH_OPENAPI, SpeechPipeline
from gateway.types import SPEECH_PATH


class SpeechEntry:
    def __init__(self, pipeline: SpeechPipeline) -> None:
        self.pipeline = pipeline

    async def enter(self, scope: Scope, receive: Receive, send: Send, request_id: str) -> None:
        """``Entry``'s handler for POST /v1/audio/speech (the request id already set)."""
        response = await self.pipeline.handle(Request(scope, receive), request_id)
        response.raw_headers.append(id_header(request_id))
        await response(scope, receive, send)


def speech_route(pipeline: SpeechPipeline) -> APIRouter:
    """The same endpoint as a framework route: it documents the request body in the
    OpenAPI schema and makes other methods on the path a 405. ``SpeechEntry`` serves it."""
    router = APIRouter()

    @router.post(SPEECH_PATH, openapi_extra=SPEECH_OPENAPI, response_class=Response)
    async def create_speech(request: Request) -> Response:
        return await pipeline.handle(request, request.state.request_id)

    return router
