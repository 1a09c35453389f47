"""Every error leaves the gateway in OpenAI's envelope, rendered here and nowhere else.

Domain code raises ``gateway.errors.GatewayError`` (or a subclass); the framework's own
refusals (unknown route, wrong method, FastAPI's validation) are mapped onto it, so a
client sees one shape with the right status, whatever refused its request.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from gateway.api.relay_response import ClientGone
from gateway.errors import GatewayError, bad_request
from gateway.security.errors import NOT_FOUND_MESSAGE

log = logging.getLogger("higgs_gateway.api")
CLIENT_CLOSED = 499  # nginx's convention for "the client went away first"


def error_response(error: GatewayError) -> Response:
    return Response(
        orjson.dumps(error.envelope()), status_code=error.status, media_type="application/json", headers=error.headers
    )


def as_gateway_error(exc: BaseException) -> GatewayError:
    """Any exception a request raised, as the error its client sees (unknown ones: 500)."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "header")]
        param = ".".join(loc) or None
        return bad_request(f"{param + ': ' if param else ''}{first.get('msg', 'invalid request')}", param)
    if isinstance(exc, StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        headers = dict(exc.headers or {})
        if exc.status_code == 404 and message == "Not Found":
            return GatewayError(404, NOT_FOUND_MESSAGE, code="not_found", headers=headers)
        return GatewayError(exc.status_code, message, headers=headers)
    if isinstance(exc, ClientDisconnect | ClientGone):
        # The client hung up (mid-body, say): nobody reads the answer, and it is no fault of ours.
        return GatewayError(CLIENT_CLOSED, "The client closed the connection.", code="client_closed")
    log.error("unhandled error", exc_info=exc)
    return GatewayError(500, "Internal gateway error.", code="internal_error")


def render_error(exc: BaseException) -> Response:
    return error_response(as_gateway_error(exc))


def install_error_handlers(app: FastAPI) -> None:
    async def handler(_: Request, exc: Exception) -> Response:
        return render_error(exc)

    for kind in (GatewayError, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(kind, handler)
