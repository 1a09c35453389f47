"""The worker's error bodies: ``{"error": {"message", "type", "param", "code"}}``, code = status."""

from __future__ import annotations

from http import HTTPStatus

from fastapi.responses import JSONResponse

# vLLM names the error type after the HTTP status class.
_ERROR_TYPES = {
    HTTPStatus.BAD_REQUEST: "BadRequestError",
    HTTPStatus.NOT_FOUND: "NotFoundError",
    HTTPStatus.INTERNAL_SERVER_ERROR: "InternalServerError",
}


class WorkerError(Exception):
    """A request the worker refuses or fails; rendered by ``error_response``."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = HTTPStatus(status)
        self.message = message
        self.param = param


def error_body(status: int, message: str, param: str | None = None) -> dict[str, object]:
    code = HTTPStatus(status)
    return {"error": {"message": message, "type": _ERROR_TYPES.get(code, code.phrase.replace(" ", "") + "Error"), "param": param, "code": int(code)}}


def error_response(error: WorkerError) -> JSONResponse:
    return JSONResponse(error_body(error.status, error.message, error.param), status_code=int(error.status))


def bad_request(message: str, param: str | None = None) -> WorkerError:
    return WorkerError(HTTPStatus.BAD_REQUEST, message, param)
