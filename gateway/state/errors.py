"""The one error the shared state raises toward clients: a ``GatewayError`` like every other."""

from __future__ import annotations

from gateway.errors import GatewayError

RETRY_AFTER_S = 5


class StateUnavailable(GatewayError):
    """The shared state store cannot be reached (or answered too slowly): nothing changed.

    Admin writes and voice uploads answer 503 with this rather than change one replica
    only and pretend the fleet agrees.
    """

    def __init__(self, message: str = "The shared state store is unavailable; nothing was changed. Retry shortly.") -> None:
        super().__init__(
            503, message, code="state_unavailable", headers={"Retry-After": str(RETRY_AFTER_S)}
        )
