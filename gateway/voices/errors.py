"""The one exception voice code raises toward clients: a ``GatewayError`` about ``voice``.

Keeping the defaults here means every voice failure reads the same to a client (Open
WebUI shows only ``error.message``, so the message must say what to do).
"""

from __future__ import annotations

from gateway.errors import GatewayError


class VoiceError(GatewayError):
    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        code: str = "invalid_voice",
        param: str | None = "voice",
    ) -> None:
        super().__init__(status, message, param=param, code=code)
