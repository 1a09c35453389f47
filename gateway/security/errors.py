"""Security refusals (API keys, admin token, ``ref_audio``): ``GatewayError``s like every other.

The headers matter to clients: ``WWW-Authenticate`` on 401, ``Retry-After`` on 429 (the
OpenAI SDK honours it when it retries).
"""

from __future__ import annotations

from gateway.errors import GatewayError

# Unknown routes and disabled admin routes answer alike, so the admin surface stays hidden.
NOT_FOUND_MESSAGE = "Not found: no such route on this gateway."


class SecurityError(GatewayError):
    def __init__(
        self,
        status: int,
        message: str,
        code: str | None,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, message, param=param, code=code, headers=headers)


class AuthError(SecurityError):
    """401/403/404/429 from the API-key or admin check."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None,
        retry_after: int | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        merged = dict(headers or {})
        if retry_after is not None:
            merged["Retry-After"] = str(retry_after)
        super().__init__(status, message, code, headers=merged)
        self.retry_after = retry_after


class RefAudioError(SecurityError):
    """A ``ref_audio`` value the gateway will not pass to a worker (always 400)."""

    def __init__(self, message: str, code: str = "invalid_ref_audio") -> None:
        super().__init__(400, message, code, param="ref_audio")
