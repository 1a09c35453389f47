"""One voice session: the receive loop, as the released worker runs it, with the gateway's extensions.

Lifecycle, messages, error texts and which errors end the session are the worker's
(``serving_speech_stream.py``; docs/sessions.md lists them). What differs:

- the socket is read all the time: synthesis runs in the pipeline, so ``input.text`` and
  ``input.cancel`` are acted on while audio flows, and the idle timer runs only while the
  session has nothing left to deliver;
- ``input.cancel`` stops the current utterance (barge-in) and answers ``input.cancelled``;
- the session is its key's: each utterance spends a rate-limit token (the handshake's pays
  for the first), each sentence in flight holds a stream slot (``pipeline``);
- text not yet sent to a worker is capped (``sessions.max_buffered_chars`` characters,
  ``sessions.max_queued_sentences`` sentences), and no sentence may be longer than an HTTP
  request's ``input`` (4096 characters): an ``input.text`` that would pass a cap is refused
  and dropped;
- a session lasts at most ``sessions.max_duration_s``, and one whose client stops reading
  for ``sessions.send_timeout_s`` is ended (``Outbox``), its slots freed;
- a session that ends on an error is closed with a close frame (1008 for the client's
  messages and timers, 1011 for an internal error) where the worker drops the connection.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import ValidationError

from gateway.errors import GatewayError
from gateway.worker.sentences import SentenceSplitter
from gateway.sessions import messages
from gateway.sessions.key import SessionKey, UnlimitedKey
from gateway.sessions.messages import Refused
from gateway.sessions.observer import SessionObserver
from gateway.sessions.outbox import (
    DEFAULT_SEND_TIMEOUT_S,
    Outbox,
    SessionSocket,
    SocketClosed,
)
from gateway.sessions.pipeline import DEFAULT_LOOKAHEAD_S, Sentence, SentencePipeline
from gateway.sessions.voice import ConfigRefused, SessionVoices
from gateway.worker.session_protocol import (
    StreamingSpeechSessionConfig,
    sentence_request,
)
from gateway.types.text_limits import MAX_INPUT_CHARS

CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008  # the client's message or silence ended it
CLOSE_INTERNAL = 1011
DEBUG_FIELD = "gateway_debug"  # session.config extension: routing in every audio.start


class SessionEnd(StrEnum):
    """How a session ended (metric label)."""

    CLOSED = "closed"  # session.close
    CLIENT_GONE = "client_gone"  # close frame or dropped connection
    TIMEOUT = "timeout"
    MAX_DURATION = "max_duration"  # sessions.max_duration_s reached
    STALLED = "stalled"  # the client stopped reading (sessions.send_timeout_s)
    REFUSED = "refused"  # a message that ends the session (bad first message, bad config)
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class SessionLimits:
    config_timeout_s: float
    idle_timeout_s: float
    max_buffered_chars: int
    max_queued_sentences: int = 256
    max_duration_s: float = 3600.0
    lookahead_s: float = DEFAULT_LOOKAHEAD_S  # the pipeline's window
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S  # the outbox's


STALLED_REASON = "client stopped reading"
MAX_DURATION_REASON = "maximum session duration reached"


class _Ended(Exception):
    def __init__(self, how: SessionEnd, code: int, reason: str = "") -> None:
        super().__init__(how.value)
        self.how = how
        self.code = code
        self.reason = reason


class Session:
    def __init__(
        self,
        socket: SessionSocket,
        outbox: Outbox,
        pipeline: SentencePipeline,
        voices: SessionVoices,
        limits: SessionLimits,
        clock: Callable[[], float],
        observer: SessionObserver,
        key: SessionKey | None = None,
    ) -> None:
        self._socket = socket
        self._key = key if key is not None else UnlimitedKey()
        self._prepaid = True  # the handshake's rate-limit token pays for the first utterance
        self._refused = False  # the open utterance was refused (rate limit): its text is dropped
        self._ends_at = asyncio.get_running_loop().time() + limits.max_duration_s
        self._waiting: asyncio.Timeout | None = None  # the receive in progress, woken by a stall
        outbox.on_stall = self._stalled
        self._outbox = outbox
        self._pipeline = pipeline
        self._voices = voices
        self._limits = limits
        self._clock = clock
        self._observer = observer
        self._config: StreamingSpeechSessionConfig | None = None
        self._splitter = SentenceSplitter("none")
        self._utterance = 0
        self._sentence = 0
        # Open from the first non-empty input.text to input.done (or input.cancel).
        self._open = False
        self.debug = False
        # For the session's trace: utterances begun, sentences cut, the config in force.
        self.utterances = 0
        self.sentences = 0

    @property
    def config(self) -> StreamingSpeechSessionConfig | None:
        return self._config

    async def run(self) -> SessionEnd:
        """Serve until the session ends; the caller closes the pipeline whatever happens."""
        try:
            while True:
                await self._handle(await self._next_message())
        except _Ended as end:
            if end.code != CLOSE_NORMAL or end.how in (SessionEnd.CLOSED, SessionEnd.STALLED):
                await self._pipeline.close()  # the slots first: the close may wait for the client
                await self._outbox.close(end.code, end.reason)
            return end.how
        except SocketClosed:
            if self._outbox.stalled:
                await self._pipeline.close()
                await self._outbox.close(CLOSE_POLICY, STALLED_REASON)
                return SessionEnd.STALLED
            return SessionEnd.CLIENT_GONE

    def _stalled(self) -> None:
        """The outbox gave up on a client that stopped reading: stop waiting for its messages."""
        waiting = self._waiting
        if waiting is not None and not waiting.expired():  # an expiring one ends the wait anyway
            waiting.reschedule(asyncio.get_running_loop().time())

    async def _next_message(self) -> str:
        timeout = self._limits.config_timeout_s if self._config is None else self._limits.idle_timeout_s
        loop = asyncio.get_running_loop()
        while True:
            await self._check_alive()
            try:
                async with asyncio.timeout(min(timeout, self._ends_at - loop.time())) as waiting:
                    self._waiting = waiting
                    frame = await self._socket.receive()
            except TimeoutError:
                await self._check_alive()
                if self._config is None:
                    await self._fail("Timeout waiting for session.config", SessionEnd.TIMEOUT)
                # Idle is the whole timeout with no message and nothing delivered: a client
                # listening to a long reply is not idle, nor one whose reply ended a moment
                # ago (the timer that started at its last message may be about to expire).
                timeout = self._limits.idle_timeout_s - self._pipeline.idle_for()
                if timeout > 0:
                    continue
                await self._fail("Idle timeout: no message received", SessionEnd.TIMEOUT)
            finally:
                self._waiting = None
            if frame is None:
                raise _Ended(SessionEnd.CLIENT_GONE, CLOSE_NORMAL)
            if isinstance(frame, bytes):
                await self._fail(messages.BINARY_FRAME, SessionEnd.REFUSED)
            return frame  # type: ignore[return-value]

    async def _check_alive(self) -> None:
        """End a session whose client stopped reading, or that reached its maximum duration."""
        if self._outbox.stalled:
            raise _Ended(SessionEnd.STALLED, CLOSE_POLICY, STALLED_REASON)
        if asyncio.get_running_loop().time() >= self._ends_at:
            limit = self._limits.max_duration_s
            await self._fail(f"Session reached its maximum duration ({limit:g} s); open a new one", SessionEnd.MAX_DURATION)

    async def _handle(self, raw: str) -> None:
        try:
            message = messages.parse(raw)
        except Refused as refused:
            if self._config is None:
                await self._fail(refused.message, SessionEnd.REFUSED)
            await self._send_error(refused.message)
            return
        kind = message.get("type")
        if kind == "session.config":
            await self._configure(message)
        elif self._config is None:
            await self._fail(f"Expected session.config, got: {kind}", SessionEnd.REFUSED)
        elif kind == "input.text":
            await self._text(message.get("text", ""))
        elif kind == "input.done":
            await self._flush()
        elif kind == "input.cancel":
            await self._cancel()
        elif kind == "session.close":
            raise _Ended(SessionEnd.CLOSED, CLOSE_NORMAL)  # unflushed text is dropped
        else:
            await self._send_error(f"Unknown message type: {kind}")

    async def _configure(self, message: dict[str, object]) -> None:
        if self._open:
            await self._send_error(messages.CONFIG_DURING_UTTERANCE)
            return
        try:
            fields = {key: value for key, value in message.items() if key != "type"}
            config = await self._voices.accept(StreamingSpeechSessionConfig(**fields), self._config)  # type: ignore[arg-type]
        except ValidationError as exc:
            await self._refuse_config(f"Invalid session config: {exc}")
            return
        except ConfigRefused as exc:
            await self._refuse_config(exc.message)
            return
        self._config = config
        self._splitter = SentenceSplitter(config.split_granularity)
        self.debug = message.get(DEBUG_FIELD) is True

    async def _refuse_config(self, text: str) -> None:
        if self._config is None:
            await self._fail(text, SessionEnd.REFUSED)
        await self._send_error(text)  # the previous config stays

    async def _text(self, text: object) -> None:
        if not isinstance(text, str):
            await self._send_error("input.text requires a string value")
            return
        if self._refused:
            return  # the rest of a refused utterance: already answered once
        limit = self._limits.max_buffered_chars
        waiting = len(self._splitter.pending) + self._pipeline.queued_chars
        if waiting + len(text) > limit:
            hint = "send input.done to flush it first" if not self._pipeline.queued_chars else "wait for the reply to play, or send input.cancel"
            await self._send_error(f"Text waiting to be spoken would exceed {limit} characters; {hint}")
            return
        splitter = copy.copy(self._splitter)  # tried first: a refused input.text leaves no trace
        units = splitter.feed(text)
        if len(splitter.pending) > MAX_INPUT_CHARS or any(len(unit) > MAX_INPUT_CHARS for unit in units):
            await self._send_error(f"A sentence would exceed {MAX_INPUT_CHARS} characters, the most one speech request takes; split the text")
            return
        queued_limit = self._limits.max_queued_sentences
        if self._pipeline.queued_sentences + len(units) > queued_limit:
            await self._send_error(
                f"The session already has {queued_limit} sentences waiting to be spoken; wait for the reply to play, or send input.cancel"
            )
            return
        if text and not self._open:
            self._open = True
            self.utterances += 1
            self._observer.utterance_started()
            if not await self._spend():
                return
        self._splitter = splitter
        for unit in units:
            await self._cut(unit)

    async def _spend(self) -> bool:
        """The utterance's rate-limit token; False (answered, its text dropped) when over the limit."""
        if self._prepaid:
            self._prepaid = False
            return True
        try:
            await self._key.spend_utterance()
        except GatewayError as exc:
            self._refused = True
            await self._send_error(f"Utterance {self._utterance} refused: {exc.message} Its text is dropped until input.done.")
            return False
        return True

    async def _flush(self) -> None:
        if self._refused:
            self._splitter = SentenceSplitter(self._splitter.granularity)
        for unit in self._splitter.flush():
            await self._cut(unit)
        self._pipeline.end_utterance(self._utterance, self._sentence)
        self._next_utterance()

    async def _cancel(self) -> None:
        started = self._clock()
        stopped = await self._pipeline.cancel()
        if self._open:
            stopped.setdefault(self._utterance, 0)
            self._splitter = SentenceSplitter(self._splitter.granularity)  # its unsent text goes too
            self._next_utterance()
        for utterance, total_bytes in (stopped or {self._utterance: 0}).items():
            await self._outbox.send_json(messages.cancelled(utterance, total_bytes))
        self._observer.barge_in(self._clock() - started)

    async def _cut(self, text: str) -> None:
        config = self._config
        assert config is not None
        try:
            # The worker builds the sentence's request outside its try: a config that
            # cannot make one ends the session (speaker_embedding with ref_audio).
            sentence_request(config, text)
        except ValidationError as exc:
            await self._fail(f"Internal error: {exc}", SessionEnd.ERROR, CLOSE_INTERNAL)
        precheck = messages.NO_FORCED_ALIGNER if config.word_timestamps else None
        payload: dict[str, object] | GatewayError | None = None
        if precheck is None:
            try:
                payload = self._voices.payload(config, text)
            except GatewayError as exc:  # a voice that names none: this sentence fails, as on the worker
                payload = exc
        sentence = Sentence(self._utterance, self._sentence, text, config, payload, self._clock(), precheck)
        self._sentence += 1
        self.sentences += 1
        self._pipeline.add(sentence)

    def _next_utterance(self) -> None:
        self._utterance += 1
        self._sentence = 0
        self._open = False
        self._refused = False

    async def _send_error(self, text: str) -> None:
        await self._outbox.send_json(messages.error(text))

    async def _fail(self, text: str, how: SessionEnd, code: int = CLOSE_POLICY) -> None:
        """Answer ``text`` and end the session (the worker ends it the same way)."""
        try:
            await self._send_error(text)
        except SocketClosed:
            if self._outbox.stalled:
                raise _Ended(SessionEnd.STALLED, CLOSE_POLICY, STALLED_REASON) from None
            raise _Ended(SessionEnd.CLIENT_GONE, CLOSE_NORMAL) from None
        raise _Ended(how, code, MAX_DURATION_REASON if how is SessionEnd.MAX_DURATION else "")
