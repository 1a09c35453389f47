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


class StateFull(StateUnavailable):
    """The store answers but is at its memory ceiling (Redis ``maxmemory``, nothing left it
    may evict): writes are refused, reads and deletes still work.

    Not an outage: a limit that cannot be written is refused (503) whatever
    ``state.rate_limit_failure_mode`` says, or every key would go unlimited as soon as
    voices fill the store.
    """
