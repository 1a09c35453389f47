"""The one exception voice code raises toward clients, already shaped as an OpenAI error.

The API layer turns it into ``{"error": {"message", "type", "param", "code"}}`` with
``status``; keeping the shape here means every voice failure reads the same to a client
(Open WebUI shows only ``error.message``, so the message must say what to do).
"""

from __future__ import annotations

from typing import Any


class VoiceError(Exception):
    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        code: str = "invalid_voice",
        param: str | None = "voice",
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.param = param
        self.type = type
        self.headers: dict[str, str] = {}

    def envelope(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
