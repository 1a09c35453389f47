"""A request's ``x-request-id``: an incoming one is echoed when it is well formed, otherwise
one is made. ``api.entry.Entry`` sets it once per request, on the response and ``REQUEST_ID``.
"""

from __future__ import annotations

import os

from starlette.types import Scope

from gateway.security.headers import REQUEST_ID_PATTERN
from gateway.types import REQUEST_ID_HEADER

_HEADER = REQUEST_ID_HEADER.encode()


def new_request_id() -> str:
    # 128 random bits as hex, like uuid4().hex without building a UUID object per request.
    return os.urandom(16).hex()


def incoming_request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == _HEADER:
            # Echoed ids end up in logs and other systems' headers. One pattern for the whole
            # gateway (the documented charset), matched in full: ``re.match`` with ``$``
            # let an id with a trailing newline through, to be echoed as a header value.
            text = value.decode("latin-1")
            return text if REQUEST_ID_PATTERN.fullmatch(text) else new_request_id()
    return new_request_id()
