"""``/v1/audio/speech/stream``: the WebSocket handshake, then one voice session.

Everything the HTTP stack guarantees happens here before the upgrade, so a refused
session is an ordinary HTTP answer (the OpenAI envelope, ``x-request-id``,
``Retry-After``) instead of a socket that opens and closes:

- the request id (``api.entry.Entry`` echoes or makes it) on the handshake response too;
- the origin: a browser page may open a session only from the gateway's own origin or
  one of ``server.cors_origins`` (browsers do not apply CORS to WebSockets, so the
  server must; a client that is not a browser sends no ``Origin``);
- the API key, rate limit and the key's session places (``max_sessions`` of its tier); the
  session then spends a rate-limit token per utterance and holds one of the key's streams
  per sentence in flight (``KeySession``), as HTTP requests do.
  Browsers cannot set ``Authorization`` on a WebSocket: the key may also come as the
  subprotocol ``bearer.<key>``, offered with ``higgs-gateway`` (the one answered: a key is
  never echoed), or as the query parameter ``api_key``, which is taken out of the scope
  before anything logs the path (uvicorn's own handshake lines included);
- capacity: a fleet with no routable worker, a full `latency` queue (the class of every
  first sentence) or this replica's ``sessions.max_open_per_replica`` reached is refused (503/429
  with ``Retry-After``).

Servers without the WebSocket denial-response extension get the same refusal as an
``error`` message and close 1013 (try again later) or 1008.

The session is traced from the handshake on (``SpeechTracing.session``: one span when
tracing, refusals included) and its id is ``REQUEST_ID`` while it runs, so its log lines
carry it; each sentence is sent with an id and trace headers derived from the session's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.api.access import ApiKeyGate, KeySession, voice_owner
from gateway.api.errors import error_response
from gateway.errors import GatewayError
from gateway.routing.admission import Admission
from gateway.sessions import messages
from gateway.sessions.observer import SessionObserver
from gateway.sessions.outbox import Outbox
from gateway.sessions.pipeline import EncoderFactory, SentencePipeline
from gateway.sessions.sentence import SentenceUpstream
from gateway.sessions.session import Session, SessionEnd, SessionLimits
from gateway.sessions.voice import SessionVoices
from gateway.telemetry.tracing import SessionTrace, SpeechTracing
from gateway.types import REQUEST_ID_HEADER, SlaClass
from gateway.types.records import SessionSummary
from gateway.telemetry.propagation import PassThroughTracing

log = logging.getLogger("gateway.sessions")

SUBPROTOCOL = "higgs-gateway"
BEARER_SUBPROTOCOL = "bearer."
KEY_QUERY = "api_key"
CLOSE_TRY_AGAIN = 1013
SWITCHING_PROTOCOLS = 101
DENIED = "denied"  # the handshake was refused: no session ran


class StarletteSocket:
    """``SessionSocket`` over Starlette's WebSocket."""

    def __init__(self, websocket: WebSocket) -> None:
        self._ws = websocket

    async def receive(self) -> str | bytes | None:
        try:
            message = await self._ws.receive()
        except (WebSocketDisconnect, RuntimeError):
            return None
        if message["type"] == "websocket.disconnect":
            return None
        text = message.get("text")
        return text if text is not None else (message.get("bytes") or b"")

    async def send_text(self, text: str) -> None:
        await self._ws.send_text(text)

    async def send_bytes(self, data: bytes) -> None:
        await self._ws.send_bytes(data)

    async def close(self, code: int, reason: str = "") -> None:
        await self._ws.close(code, reason or None)


class SessionEndpoint:
    def __init__(
        self,
        auth: ApiKeyGate,
        admission: Admission,  # type: ignore[type-arg]
        upstream: SentenceUpstream,
        voices: SessionVoices,
        encoders: EncoderFactory,
        limits: SessionLimits,
        observer: SessionObserver,
        *,
        allowed_origins: list[str],
        max_open_per_replica: int | None,
        clock: Callable[[], float],
        tracing: SpeechTracing | None = None,
        retry_after_s: int = 1,
    ) -> None:
        self._auth = auth
        self._admission = admission
        self._upstream = upstream
        self._voices = voices
        self._encoders = encoders
        self._limits = limits
        self._observer = observer
        self._allowed_origins = set(allowed_origins)
        self._max_open_per_replica = max_open_per_replica
        self._retry_after = str(retry_after_s)  # admission.retry_after_s, as every other refusal says
        self._clock = clock
        # Spans when tracing is configured; otherwise only the headers workers get.
        self._tracing = tracing or PassThroughTracing()
        self.open_sessions = 0

    async def enter(self, scope: Scope, receive: Receive, send: Send, request_id: str) -> None:
        """``Entry``'s handler for the session path's WebSocket upgrades (the request id set)."""
        query_key = take_query_key(scope)  # before anything reads or logs the path
        await self.serve(WebSocket(scope, receive, send), request_id, query_key)

    async def serve(self, websocket: WebSocket, request_id: str, query_key: str | None = None) -> None:
        trace = self._tracing.session(websocket.scope["headers"], request_id)
        summary = SessionSummary(500, SessionEnd.ERROR.value)  # unless it ends another way below
        try:
            summary = await self._serve(websocket, request_id, trace, query_key)
        finally:
            trace.finish(summary)

    async def _serve(
        self, websocket: WebSocket, request_id: str, trace: SessionTrace, query_key: str | None
    ) -> SessionSummary:
        headers = websocket.headers
        try:
            self._check_origin(headers.get("origin"), headers.get("host"))
            offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
            chosen = _chosen(offered)
            key_hold = await self._auth.open_session(_authorization(headers.get("authorization"), offered, query_key))
        except GatewayError as exc:
            await _deny(websocket, exc, request_id)
            return SessionSummary(exc.status, DENIED, exc.code)
        try:
            try:
                self._check_capacity()
            except GatewayError as exc:
                await _deny(websocket, exc, request_id)
                return SessionSummary(exc.status, DENIED, exc.code)
            self.open_sessions += 1
            try:
                await websocket.accept(subprotocol=chosen, headers=[(REQUEST_ID_HEADER.encode(), request_id.encode())])
                return await self._run(websocket, request_id, trace, key_hold)
            finally:
                self.open_sessions -= 1
        finally:
            await key_hold.close()

    async def _run(self, websocket: WebSocket, request_id: str, trace: SessionTrace, key: KeySession) -> SessionSummary:
        socket = StarletteSocket(websocket)
        limits = self._limits
        outbox = Outbox(socket, limits.send_timeout_s)
        session: Session | None = None
        pipeline = SentencePipeline(
            outbox, self._upstream, self._encoders, self._observer, debug=lambda: session is not None and session.debug,
            trace=trace, lookahead_s=limits.lookahead_s, key=key,
        )  # fmt: skip
        session = Session(socket, outbox, pipeline, self._voices.for_owner(voice_owner(key.key)), limits, self._clock, self._observer, key)
        self._observer.session_opened()
        how = SessionEnd.ERROR
        try:
            how = await session.run()
        except Exception:
            log.exception("voice session %s failed", request_id)
            await outbox.close(1011)
        finally:
            await pipeline.close()  # every sentence's request ended and its slot freed: their spans too
            self._observer.session_closed(how.value)
            log.info("voice session %s ended: %s", request_id, how.value, extra={"trace_id": trace.trace_id})
        config = session.config
        return SessionSummary(
            SWITCHING_PROTOCOLS, how.value, None, session.utterances, session.sentences,
            None if config is None else config.model, None if config is None else config.response_format,
        )  # fmt: skip

    def _check_origin(self, origin: str | None, host: str | None) -> None:
        if origin is None or "*" in self._allowed_origins or origin in self._allowed_origins:
            return
        if host is not None and urlsplit(origin).netloc == host:
            return  # the gateway's own pages (the playground)
        raise GatewayError(403, f"WebSocket connections from origin {origin} are not allowed (server.cors_origins).", code="origin_not_allowed")

    def _check_capacity(self) -> None:
        self._admission.precheck(SlaClass.LATENCY)  # 503 no workers / 429 latency queue full
        if self._max_open_per_replica is not None and self.open_sessions >= self._max_open_per_replica:
            raise GatewayError(
                503, f"This gateway already serves {self._max_open_per_replica} voice sessions; retry shortly.",
                code="too_many_sessions", headers={"Retry-After": self._retry_after},
            )  # fmt: skip


def _authorization(header: str | None, offered: list[str], query_key: str | None) -> str | None:
    """The key as an ``Authorization`` value, from the header, a subprotocol or the query."""
    if header:
        return header
    for protocol in offered:
        if protocol.startswith(BEARER_SUBPROTOCOL) and len(protocol) > len(BEARER_SUBPROTOCOL):
            return f"Bearer {protocol[len(BEARER_SUBPROTOCOL):]}"
    return f"Bearer {query_key}" if query_key else None


def _chosen(offered: list[str]) -> str | None:
    """The subprotocol answered. Browsers fail a handshake that offered some and got none, and
    the answer must be one offered: so a client offering only ``bearer.<key>`` is refused
    rather than answered with its key (which would put the key in every proxy's view)."""
    if SUBPROTOCOL in offered:
        return SUBPROTOCOL
    others = [protocol for protocol in offered if not protocol.startswith(BEARER_SUBPROTOCOL)]
    if others:
        return others[0]
    if offered:
        raise GatewayError(
            400, f"Offer the subprotocol {SUBPROTOCOL!r} with 'bearer.<key>': the gateway answers {SUBPROTOCOL!r}, never the key.",
            code="subprotocol_required",
        )  # fmt: skip
    return None


def take_query_key(scope: Scope) -> str | None:
    """The ``api_key`` query parameter, removed from the scope's query string: the servers'
    handshake log lines (and anything else) then see the path without it."""
    query: bytes = scope.get("query_string", b"")
    if not query:
        return None  # parsed whenever there is one: ``api%5Fkey`` is the same parameter
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    keys = [value for name, value in pairs if name == KEY_QUERY]
    if not keys:
        return None  # left exactly as sent
    scope["query_string"] = urlencode([(name, value) for name, value in pairs if name != KEY_QUERY]).encode("latin-1")
    return keys[0]


async def _deny(websocket: WebSocket, error: GatewayError, request_id: str) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        response = error_response(error)
        response.headers[REQUEST_ID_HEADER] = request_id
        await websocket.send_denial_response(response)
        return
    await websocket.accept()
    await websocket.send_text(messages.encode(messages.error(error.message)))
    await websocket.close(CLOSE_TRY_AGAIN if error.status in (429, 503) else 1008)
