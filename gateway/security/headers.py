"""Which ``x-request-id`` values the gateway echoes and logs: no control characters, nothing odd.

An ``x-request-id`` is echoed in the response and written to every log line of the
request: a value with CR/LF could forge log lines (or headers, behind a lax proxy), and
odd bytes break log parsers. An unacceptable id is replaced, not cleaned: a stripped
value could collide with another request's id.
"""

from __future__ import annotations

import re

REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._~:/+=@-]{1,128}")

