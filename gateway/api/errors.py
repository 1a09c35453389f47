"""Every error leaves the gateway in OpenAI's envelope, with the right status.

``{"error": {"message", "type", "param", "code"}}``: Open WebUI shows only
``error.message`` and the OpenAI SDK retries 408/409/429/5xx, so client mistakes must be
4xx (never FastAPI's 422) and capacity problems 429/503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from gateway.security.errors import NOT_FOUND_MESSAGE, NOT_FOUND_TYPE, SecurityError
from gateway.state.errors import StateUnavailable
from gateway.voices.errors import VoiceError

log = logging.getLogger("higgs_gateway.api")

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


class ApiError(Exception):
    """Raised anywhere in a request; rendered as the OpenAI error envelope."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type_: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_ or _TYPE_BY_STATUS.get(status, "server_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> Response:
        return Response(
            orjson.dumps(self.body()), status_code=self.status, media_type="application/json", headers=self.headers
        )


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _validation_error(exc: RequestValidationError) -> ApiError:
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "header")]
    param = ".".join(loc) or None
    return bad_request(f"{param + ': ' if param else ''}{first.get('msg', 'invalid request')}", param)


def render_error(exc: Exception) -> Response:
    """The envelope response for any exception a request raised (unknown ones: 500)."""
    if isinstance(exc, ApiError):
        return exc.response()
    if isinstance(exc, (SecurityError, VoiceError, StateUnavailable)):
        return Response(orjson.dumps(exc.envelope()), status_code=exc.status, media_type="application/json", headers=exc.headers)
    log.exception("unhandled error", exc_info=exc)
    return ApiError(500, "Internal gateway error.", code="internal_error").response()


def install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return exc.response()

    async def on_validation(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return _validation_error(exc).response()

    async def on_http(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        headers = dict(exc.headers or {})
        if exc.status_code == 404 and message == "Not Found":
            return ApiError(404, NOT_FOUND_MESSAGE, code="not_found", type_=NOT_FOUND_TYPE, headers=headers).response()
        return ApiError(exc.status_code, message, code=None, headers=headers).response()

    async def on_domain_error(_: Request, exc: Exception) -> Response:
        # Security and voice errors arrive already shaped as OpenAI envelopes.
        return Response(
            orjson.dumps(exc.envelope()),  # type: ignore[attr-defined]
            status_code=exc.status,  # type: ignore[attr-defined]
            media_type="application/json",
            headers=exc.headers,  # type: ignore[attr-defined]
        )

    async def on_unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return ApiError(500, "Internal gateway error.", code="internal_error").response()

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    for domain_error in (SecurityError, VoiceError, StateUnavailable):
        app.add_exception_handler(domain_error, on_domain_error)
    app.add_exception_handler(Exception, on_unexpected)
