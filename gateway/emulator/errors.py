"""The worker's error bodies: ``{"error": {"message", "type", "param", "code"}}``, code = status.

Three producers on the released worker, three ``type``s:

* ``create_error_response`` (vllm ``serve/exception_handling/error_response.py``): a
  ``ValueError`` or a plain message is ``BadRequestError`` 400, an unknown model
  ``NotFoundError`` 404, a generation failure ``InternalServerError`` 500 ("Speech
  generation failed: ..."); the message passes ``sanitize_message``;
* FastAPI's request validation (vllm ``handlers/validation.py``): ``"Bad Request"`` 400,
  "N validation error(s): ..." with ``param`` the cleaned location (``body.max_new_tokens``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse

# vLLM names the error type after the HTTP status class.
_ERROR_TYPES = {
    HTTPStatus.BAD_REQUEST: "BadRequestError",
    HTTPStatus.NOT_FOUND: "NotFoundError",
    HTTPStatus.INTERNAL_SERVER_ERROR: "InternalServerError",
}
VALIDATION_TYPE = HTTPStatus.BAD_REQUEST.phrase  # "Bad Request"


class WorkerError(Exception):
    """A request the worker refuses or fails; rendered by ``error_response``."""

    def __init__(self, status: int, message: str, param: str | None = None, err_type: str | None = None) -> None:
        super().__init__(message)
        self.status = HTTPStatus(status)
        self.message = message
        self.param = param
        self.err_type = err_type


def error_body(status: int, message: str, param: str | None = None, err_type: str | None = None) -> dict[str, object]:
    code = HTTPStatus(status)
    kind = err_type or _ERROR_TYPES.get(code, code.phrase.replace(" ", "") + "Error")
    return {"error": {"message": message, "type": kind, "param": param, "code": int(code)}}


def error_response(error: WorkerError) -> JSONResponse:
    return JSONResponse(error_body(error.status, error.message, error.param, error.err_type), status_code=int(error.status))


def bad_request(message: str, param: str | None = None) -> WorkerError:
    return WorkerError(HTTPStatus.BAD_REQUEST, sanitize_message(message), param)


def generation_failed(detail: str) -> WorkerError:
    """serving_speech.py create_speech: any other exception while preparing or generating."""
    return WorkerError(HTTPStatus.INTERNAL_SERVER_ERROR, sanitize_message(f"Speech generation failed: {detail}"))


def sanitize_message(message: str) -> str:
    """vllm ``serve/exception_handling/utils.py``: strip addresses, tracebacks and paths."""
    message = re.sub(r" at 0x[0-9a-f]+>", ">", message)
    message = re.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", message)
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>", message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


# ---- request validation (vllm serve/exception_handling/handlers/validation.py) ---------------
_BRACKETED_INTERNAL = re.compile(r"[\[\]{}()]")
_INTERNAL_LOC_MARKERS = frozenset(
    {
        "function-wrap", "function-after", "function-before", "function-plain", "json-or-python",
        "lax-or-strict", "chain", "default", "nullable", "tagged-union", "union", "call", "arguments",
        "is-instance", "is-subclass", "callable", "str", "int", "float", "bool", "bytes", "bytearray",
        "list", "tuple", "dict", "set", "frozenset", "complex", "none", "nonetype",
    }
)  # fmt: skip
_MAX_REPORTED_ERRORS = 10
_MAX_ERROR_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000


def validation_error(errors: Sequence[Any]) -> WorkerError:
    """FastAPI's ``RequestValidationError`` as vLLM renders it: 400 "Bad Request"."""
    param = None
    if errors and isinstance(errors[0], dict) and errors[0].get("loc"):
        param = _clean_loc(tuple(errors[0]["loc"]))
    if errors:
        label = "error" if len(errors) == 1 else "errors"
        message = f"{len(errors)} validation {label}:\n"
        message += "".join(f"  {_format_error(error)}\n" for error in errors[:_MAX_REPORTED_ERRORS])
        if len(errors) > _MAX_REPORTED_ERRORS:
            message += f"  ...and {len(errors) - _MAX_REPORTED_ERRORS} more {label}\n"
        message = message.rstrip()
    else:
        message = "Validation error"
    return WorkerError(HTTPStatus.BAD_REQUEST, sanitize_message(message), param, VALIDATION_TYPE)


def _clean_loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not (_BRACKETED_INTERNAL.search(str(p)) or str(p).lower() in _INTERNAL_LOC_MARKERS)]
    return ".".join(parts) if parts else ".".join(str(p) for p in loc)


def _format_error(error: Any) -> str:
    if isinstance(error, dict):
        error = dict(error)
        if "input" in error:
            error["input"] = _summarize_input(error["input"])
        if isinstance(error.get("loc"), (tuple, list)):
            error["loc"] = _clean_loc(tuple(error["loc"]))
    text = str(error)
    return text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text


def _summarize_input(value: Any) -> Any:
    if isinstance(value, str):
        return value[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]" if len(value) > _MAX_ERROR_INPUT_CHARS else value
    if isinstance(value, (bytes, bytearray)):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    return text[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_INPUT_CHARS else text
