"""The one error the shared state raises toward clients, already shaped as an OpenAI error."""

from __future__ import annotations

from typing import Any

RETRY_AFTER_S = 5


class StateUnavailable(Exception):
    """The shared state store cannot be reached (or answered too slowly): nothing changed.

    Admin writes and voice uploads answer 503 with this rather than change one replica
    only and pretend the fleet agrees.
    """

    status = 503

    def __init__(self, message: str = "The shared state store is unavailable; nothing was changed. Retry shortly.") -> None:
        super().__init__(message)
        self.message = message
        self.headers: dict[str, str] = {"Retry-After": str(RETRY_AFTER_S)}

    def envelope(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": "server_error", "param": None, "code": "state_unavailable"}}
