"""Credentials kept out of every log line, whoever wrote it.

The gateway's own lines never carry a key, but the servers under it log what a client
sent: uvicorn's WebSocket handshake line holds the path with its query string, so a
client that puts ``?api_key=`` in the URL (documented for browsers) would have its key,
right or wrong, written at INFO. ``RedactSecrets`` on the log handler rewrites any record
whose text holds a credential-looking query parameter or bearer token, so no logger (ours,
uvicorn's, websockets', httpx's) can write one.
"""

from __future__ import annotations

import logging
import re

MASK = "***"
# Query parameters that carry credentials: the gateway's ``api_key`` and the usual others.
_SECRET_QUERY = re.compile(
    r"(?i)([?&;](?:api(?:[_-]|%5f)?key|access(?:[_-]|%5f)?token|token|key|password|secret)=)[^&;#\s\"'\]\)]*"
)
# ``Authorization: Bearer <token>`` and the WebSocket subprotocol form ``bearer.<token>``;
# 8+ characters so prose such as "Bearer token" stays readable.
_BEARER = re.compile(r"(?i)(\bbearer[ .])[A-Za-z0-9._~+/=-]{8,}")
# Cheap first look: most lines hold none of these, and are left untouched.
_HINTS = ("=", "earer")


def redact(text: str) -> str:
    return _BEARER.sub(rf"\g<1>{MASK}", _SECRET_QUERY.sub(rf"\g<1>{MASK}", text))


class RedactSecrets(logging.Filter):
    """Masks credentials in a record's message (formatted once, here, when it holds any)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(hint in message for hint in _HINTS):
            cleaned = redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True
