"""The one error base every refusal extends: status, OpenAI envelope fields and headers.

Framework-free on purpose: any layer (admission, security, voices, the upstream relay)
raises a ``GatewayError`` subclass without knowing about HTTP, and the API layer renders
every one of them the same way, in one function (``gateway.api.errors.render_error``).

``{"error": {"message", "type", "param", "code"}}``: Open WebUI shows only
``error.message`` and the OpenAI SDK retries 408/409/429/5xx, so client mistakes are 4xx
(never 422) and capacity problems 429/503 with ``Retry-After``.

The ``type`` follows from the status alone, with OpenAI's names: a client can switch on it
the way it would on OpenAI's API, and no two refusals of one kind read differently.
``code`` says which situation it was (the table is in docs/errors.md). A message never
names a worker, a worker's address or what a worker answered: those go to the log, with
the request id (``log_detail``).
"""

from __future__ import annotations

from typing import Any

# OpenAI's types: every client mistake (401 and 404 included) is "invalid_request_error",
# a rate limit "requests" (OpenAI's type for a limit on requests), the server's side
# "server_error".
INVALID_REQUEST = "invalid_request_error"
RATE_LIMITED = "requests"
SERVER_ERROR = "server_error"


def error_type(status: int) -> str:
    """The envelope's ``type`` for an HTTP status: one per situation, never chosen per call."""
    if status == 429:
        return RATE_LIMITED
    return INVALID_REQUEST if 400 <= status < 500 else SERVER_ERROR


class GatewayError(Exception):
    """A request the gateway refuses or cannot serve, shaped as an OpenAI error."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        log_detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = error_type(status)
        self.headers = dict(headers or {})
        # For the operator's log only (tied to the request id there), never the client.
        self.log_detail = log_detail

    def envelope(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> GatewayError:
    return GatewayError(400, message, param=param, code=code)
