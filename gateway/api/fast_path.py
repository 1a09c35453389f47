"""The server's ASGI entry: ``POST /v1/audio/speech`` straight to its endpoint.

The speech route is the hot path and the gateway runs on few cores. Going through the
framework costs a measurable share of a relayed request's CPU: the router, the exception
and exit-stack middleware, the route wrapper, and one ``send`` wrapper per middleware
that every audio chunk passes through. This entry hands speech requests to the same
endpoint function FastAPI would call, renders errors the same way and sets the request
id itself; every other route (and the OpenAPI schema) goes through FastAPI unchanged,
and so does speech when the app is used without this entry (tests, embedding).
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gateway.api.errors import render_error
from gateway.api.request_id import incoming_request_id
from gateway.api.speech import create_speech
from gateway.types import REQUEST_ID_HEADER

SPEECH_PATH = "/v1/audio/speech"
_REQUEST_ID = REQUEST_ID_HEADER.encode()


class SpeechEntry:
    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != SPEECH_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        request_id = incoming_request_id(scope)
        scope["app"] = self.app  # what Starlette would set: routes read app.state
        scope.setdefault("state", {})["request_id"] = request_id
        request = Request(scope, receive)
        try:
            response = await create_speech(request)
        except Exception as exc:  # every refusal becomes the OpenAI envelope, as on other routes
            response = render_error(exc)
        response.raw_headers.append((_REQUEST_ID, request_id.encode()))
        await response(scope, receive, send)
