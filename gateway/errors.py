"""The one error base every refusal extends: status, OpenAI envelope fields and headers.

Framework-free on purpose: any layer (admission, security, voices, the upstream relay)
raises a ``GatewayError`` subclass without knowing about HTTP, and the API layer renders
every one of them the same way, in one function (``gateway.api.errors.render_error``).

``{"error": {"message", "type", "param", "code"}}``: Open WebUI shows only
``error.message`` and the OpenAI SDK retries 408/409/429/5xx, so client mistakes are 4xx
(never 422) and capacity problems 429/503 with ``Retry-After``.
"""

from __future__ import annotations

from typing import Any

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


class GatewayError(Exception):
    """A request the gateway refuses or cannot serve, shaped as an OpenAI error."""

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
        self.headers = dict(headers or {})

    def envelope(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> GatewayError:
    return GatewayError(400, message, param=param, code=code)
