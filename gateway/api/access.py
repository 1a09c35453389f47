"""Who may call: the API-key check every client route makes, with its rate-limit count."""

from __future__ import annotations

from starlette.datastructures import Headers

from gateway.api.sla import sla_class_or_default
from gateway.recorder import Recorder
from gateway.security.auth import ApiKeyAuth
from gateway.security.errors import AuthError


class ApiKeyGate:
    def __init__(self, keys: ApiKeyAuth, open_listings: bool, recorder: Recorder) -> None:
        self._keys = keys
        self._open_listings = open_listings
        self._recorder = recorder

    async def check(self, headers: Headers, listing: bool = False) -> str | None:
        """The key id (a digest prefix) of the request's API key, None when keys are off;
        raises AuthError 401/429 when keys are configured and this request fails them (and
        ``StateUnavailable`` 503 when a fleet-wide limit cannot be checked, failing closed)."""
        if listing and self._open_listings:
            return None
        try:
            identity = await self._keys.admit(headers.get("authorization"))
        except AuthError as exc:
            if exc.status == 429:
                self._recorder.rate_limited(sla_class_or_default(headers))
            raise
        return identity.key_id if identity.authenticated else None
