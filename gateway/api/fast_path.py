"""``POST /v1/audio/speech`` straight from the ASGI entry, past the framework's router.

The speech route is the hot path and the gateway runs on few cores: the router, the
exception and exit-stack middleware and the route wrapper cost a measurable share of the
CPU a relayed request takes. This middleware hands speech requests to the same endpoint
function directly and renders its errors the same way; every other route (and the
OpenAPI schema) still goes through FastAPI.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.errors import render_error
from gateway.api.speech import create_speech

SPEECH_PATH = "/v1/audio/speech"


class SpeechFastPath:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != SPEECH_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await create_speech(request)
        except Exception as exc:  # every refusal becomes the OpenAI envelope, as on other routes
            response = render_error(exc)
        await response(scope, receive, send)
