"""Who may call: the API-key check every client route makes, with its tier's limits and counts."""

from __future__ import annotations

from starlette.datastructures import Headers

from gateway.api.sla import sla_class_or_default
from gateway.recorder import Recorder
from gateway.security.auth import ApiKeyAuth, KeyIdentity
from gateway.security.errors import AuthError
from gateway.state.stream_limit import StreamSlot
from gateway.types import SlaClass
from gateway.types.labels import KeyResult
from gateway.voices.owners import ADMIN


def voice_owner(key: KeyIdentity | None) -> str:
    """Whose voices a caller reaches (``gateway.voices.owners``): its key's, by key id (never
    the key); with no keys configured (``key`` None or anonymous) the admin's, as ``/v1``
    then has one tenant, the operator's."""
    return key.key_id if key is not None and key.authenticated else ADMIN


class KeyStream:
    """One speech request's hold on its key: the concurrent-stream slot (if its tier limits
    streams) and its place in ``higgs_gateway_key_streams``. ``close`` once, when the
    request ends, however it ends (a second call does nothing)."""

    def __init__(self, key: KeyIdentity | None, slot: StreamSlot | None, recorder: Recorder) -> None:
        self.key = key
        self._slot = slot
        self._recorder = recorder
        self._open = key is not None
        if key is not None:
            recorder.key_stream_opened(key)

    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        assert self.key is not None
        try:
            if self._slot is not None:
                await self._slot.release()
        finally:
            # After the release: a gauge back at zero means the slot is free fleet-wide.
            self._recorder.key_stream_closed(self.key)


class ApiKeyGate:
    def __init__(self, keys: ApiKeyAuth, open_listings: bool, recorder: Recorder) -> None:
        self._keys = keys
        self._open_listings = open_listings
        self._recorder = recorder

    @property
    def open_listings(self) -> bool:
        return self._open_listings

    def identify(self, headers: Headers) -> KeyIdentity | None:
        """Who sent an open listing, spending nothing: None when keys are configured and none
        was sent; 401 for a wrong key (``ANONYMOUS`` when no keys are configured)."""
        authorization = headers.get("authorization")
        if self._keys.enabled and authorization is None:
            return None
        return self._keys.authenticate(authorization)

    async def check(self, headers: Headers, listing: bool = False) -> KeyIdentity | None:
        """The request's API key (None when keys are off or the listing is open); raises
        AuthError 401/429 when keys are configured and this request fails them (and
        ``StateUnavailable`` 503 when a fleet-wide limit cannot be checked, failing closed)."""
        if listing and self._open_listings:
            return None
        sla = sla_class_or_default(headers)
        key = await self._spend(headers.get("authorization"), sla)
        if key is not None:
            self._recorder.key_checked(key, KeyResult.ADMITTED, sla)
        return key

    async def open_speech(self, headers: Headers) -> KeyStream:
        """``check`` for a speech request, which also takes one of the key's concurrent
        streams until the returned hold is closed (429 when its tier has none free)."""
        sla = sla_class_or_default(headers)
        key = await self._spend(headers.get("authorization"), sla)
        slot = None
        if key is not None:
            try:
                slot = await self._keys.open_stream(key)
            except AuthError:
                self._recorder.key_checked(key, KeyResult.STREAM_LIMITED, sla)
                raise
            self._recorder.key_checked(key, KeyResult.ADMITTED, sla)
        return KeyStream(key, slot, self._recorder)

    async def open_session(self, authorization: str | None) -> KeySession:
        """``check`` for a voice session, which also takes one of the key's session places
        until the returned hold is closed (429 when its tier has none free). The token spent
        here pays for the session's first utterance; the hold spends one per later utterance
        and takes one of the key's streams per sentence in flight (``gateway.sessions.key``)."""
        key = await self._spend(authorization, None)  # no SLA class: not a request (recorder.key_checked)
        slot = None
        if key is not None:
            try:
                slot = await self._keys.open_session(key)
            except AuthError:
                self._recorder.key_checked(key, KeyResult.SESSION_LIMITED, None)
                raise
            self._recorder.key_checked(key, KeyResult.ADMITTED, None)
        return KeySession(key, slot, self._keys, self._recorder)

    async def _spend(self, authorization: str | None, sla: SlaClass | None) -> KeyIdentity | None:
        key = self._keys.authenticate(authorization)
        if not key.authenticated:
            return None
        try:
            await self._keys.spend(key)
        except AuthError:
            self._recorder.key_checked(key, KeyResult.RATE_LIMITED, sla)
            raise
        return key


class KeySession:
    """A voice session's hold on its key: its session place (``close`` once; again: nothing),
    and the ``SessionKey`` its utterances and sentences spend from (the HTTP limits)."""

    def __init__(self, key: KeyIdentity | None, slot: StreamSlot | None, keys: ApiKeyAuth, recorder: Recorder) -> None:
        self.key = key  # whose voices the session uses (gateway.voices.owners)
        self._slot = slot
        self.keys = keys
        self._recorder = recorder

    async def spend_utterance(self) -> None:
        key = self.key
        if key is None:
            return
        try:
            await self.keys.spend(key)
        except AuthError:
            self._recorder.key_checked(key, KeyResult.RATE_LIMITED, None)
            raise

    async def open_stream(self) -> KeyStream | None:
        """One of the key's stream slots for a sentence (None: its others hold them all)."""
        key = self.key
        if key is None:
            return KeyStream(None, None, self._recorder)
        try:
            slot = await self.keys.open_stream(key)
        except AuthError as exc:
            if exc.status == 429:
                return None  # the session waits for its own, or fails the sentence
            raise
        return KeyStream(key, slot, self._recorder)

    async def close(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            await slot.release()
