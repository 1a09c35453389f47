"""Header values the gateway echoes or logs must not carry control characters.

An ``x-request-id`` is echoed in the response and written to every log line of the
request: a value with CR/LF could forge log lines (or headers, behind a lax proxy), and
odd bytes break log parsers. An unacceptable id is replaced, not cleaned: a stripped
value could collide with another request's id.
"""

from __future__ import annotations

import re

REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._~:/+=@-]{1,128}")


def has_control_chars(value: str) -> bool:
    """True for C0 controls (including CR, LF, NUL, TAB), DEL and C1 controls."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value)


def check_header_value(value: str, name: str = "header") -> str:
    """Return ``value`` if it is safe to send as a header value, else raise ``ValueError``."""
    if has_control_chars(value):
        raise ValueError(f"{name} value contains control characters")
    return value
