"""The request id on every log line a request causes.

The entry points set ``REQUEST_ID`` for the duration of a request (a context variable:
each request task, and every task it starts, sees its own); ``RequestIdFilter`` on the
log handler copies it onto each record, where both formatters pick it up.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

import httpx

from gateway.types import REQUEST_ID_HEADER

REQUEST_ID: ContextVar[str | None] = ContextVar("higgs_gateway_request_id", default=None)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to records logged while a request is being served."""

    def filter(self, record: logging.LogRecord) -> bool:
        # The access line passes its own request_id (it is written by the request's end).
        if "request_id" not in record.__dict__:
            request_id = REQUEST_ID.get()
            if request_id is not None:
                record.request_id = request_id
        return True


async def send_request_id(request: httpx.Request) -> None:
    """httpx request hook: control-plane calls a request causes (voice uploads fanned out
    to the workers) carry its id, so the worker's side can be found from the gateway's."""
    request_id = REQUEST_ID.get()
    if request_id is not None and REQUEST_ID_HEADER not in request.headers:
        request.headers[REQUEST_ID_HEADER] = request_id
