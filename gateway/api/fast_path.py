"""The speech route's ASGI entry: ``POST /v1/audio/speech`` straight to the speech pipeline.

The speech route is the hot path and the gateway runs on few cores. Going through the
framework costs a measurable share of a relayed request's CPU: the router, the exception
and exit-stack middleware, the route wrapper, and one ``send`` wrapper per middleware
that every audio chunk passes through. This entry hands speech requests to the pipeline
(which renders its own errors) and sets the request id itself; every other request goes
to the framework app. It sits inside the outer middleware (CORS), so those apply to
speech exactly as to every other route.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.request_id import incoming_request_id
from gateway.api.speech import SPEECH_OPENAPI, SpeechPipeline
from gateway.telemetry.request_context import REQUEST_ID
from gateway.types import REQUEST_ID_HEADER, SPEECH_PATH

_REQUEST_ID = REQUEST_ID_HEADER.encode()


class SpeechEntry:
    def __init__(self, pipeline: SpeechPipeline, app: ASGIApp) -> None:
        self.pipeline = pipeline
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != SPEECH_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        request_id = incoming_request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        token = REQUEST_ID.set(request_id)  # on every log line the request causes
        try:
            response = await self.pipeline.handle(Request(scope, receive), request_id)
            response.raw_headers.append((_REQUEST_ID, request_id.encode()))
            await response(scope, receive, send)
        finally:
            REQUEST_ID.reset(token)


def speech_route(pipeline: SpeechPipeline) -> APIRouter:
    """The same endpoint as a framework route: it documents the request body in the
    OpenAPI schema and makes other methods on the path a 405. ``SpeechEntry`` serves it."""
    router = APIRouter()

    @router.post(SPEECH_PATH, openapi_extra=SPEECH_OPENAPI, response_class=Response)
    async def create_speech(request: Request) -> Response:
        return await pipeline.handle(request, request.state.request_id)

    return router
