"""The admin token: separate from API keys, so a leaked client key cannot retune the fleet.

Without a configured token the admin routes answer 404, exactly like a route that does
not exist: an unconfigured gateway does not advertise a control surface to scanners.
With one, a missing or wrong token is 401 with ``WWW-Authenticate``. The presented token
and the configured one are both hashed before ``hmac.compare_digest``, so the comparison
takes the same time whatever the token's length or how much of it was right.
"""

from __future__ import annotations

import hashlib
import hmac

from gateway.config import AuthConfig
from gateway.security.auth import bearer_token
from gateway.security.errors import NOT_FOUND_MESSAGE, AuthError

REALM = 'Bearer realm="admin"'


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


class AdminAuth:
    def __init__(self, config: AuthConfig) -> None:
        self._config = config  # read per call: a token set at run time applies at once

    @property
    def enabled(self) -> bool:
        token = self._config.admin_token
        return token is not None and bool(token.get_secret_value())

    def check(self, authorization: str | None) -> None:
        """Return if the request carries the admin token; else raise ``AuthError`` (404/401)."""
        secret = self._config.admin_token
        if secret is None or not secret.get_secret_value():
            raise AuthError(404, NOT_FOUND_MESSAGE, "not_found")
        token = bearer_token(authorization)
        if token is None:
            raise AuthError(
                401,
                "Admin token required: send 'Authorization: Bearer <admin token>'.",
                "missing_admin_token",
                headers={"WWW-Authenticate": REALM},
            )
        if not hmac.compare_digest(_digest(token), _digest(secret.get_secret_value())):
            raise AuthError(
                401,
                "Incorrect admin token.",
                "invalid_admin_token",
                headers={"WWW-Authenticate": f'{REALM}, error="invalid_token"'},
            )
