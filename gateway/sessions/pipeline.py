"""Sentences dispatched ahead and delivered strictly in order; everything cancellable at once.

Dispatch: a sentence is sent upstream once its text is complete, the sentence before it
has audio (or has ended), and it is inside the look-ahead window: a real-time player of
what was sent will reach it within ``lookahead_s``. So sentence n+1 is synthesized while n
streams, at most one request per session waits for its first audio, and a session asks the
workers for audio no faster than it is played (plus the window), however much text is
queued. While a send to the client is blocked (it is not reading), nothing is dispatched.
Each request holds one of the key's stream slots (``SessionStreams``) and reads its worker
only while the session's ``AudioBudget`` (the window's bytes) has room. The first sentence
of an utterance is routed as `latency`; every later one carries its deadline (``Playback``:
when a real-time player reaches it) and is placed by the `deadline` rules.

Delivery: one task sends, in order, each sentence's ``audio.start``, its audio (PCM as it
comes with ``stream_audio``; otherwise one frame holding the whole file, encoded here),
its ``audio.done``, and ``session.done`` after an utterance's last sentence.

``cancel`` (barge-in) and ``close`` (the session ends) stop the delivery first (no audio
follows), then cancel every sentence's request together and return once all their slots
are free. After a barge-in the player is taken as silent: the client dropped what it had
not played, so the next utterance's first sentence is dispatched at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.audio.encoder import StreamEncoder
from gateway.audio.formats import AudioFormat
from gateway.errors import GatewayError
from gateway.sessions import messages
from gateway.sessions.budget import AudioBudget
from gateway.sessions.key import SessionKey, SessionStreams, UnlimitedKey
from gateway.sessions.observer import SessionObserver
from gateway.sessions.outbox import Outbox, SocketClosed
from gateway.sessions.playback import Playback, pcm_seconds
from gateway.sessions.sentence import SentenceAudio, SentenceFailed, SentenceUpstream
from gateway.worker.session_protocol import StreamingSpeechSessionConfig
from gateway.telemetry.propagation import UNTRACED_SESSION
from gateway.telemetry.tracing import SessionTrace
from gateway.types import SlaClass
from gateway.types.codec import BYTES_PER_SECOND
from gateway.types.curve import audio_seconds_for
from gateway.types.view import RequestInfo

log = logging.getLogger("gateway.sessions")
DEFAULT_LOOKAHEAD_S = 10.0
EncoderFactory = Callable[[AudioFormat, float], StreamEncoder]
WAV_HEADER_BYTES = 44


@dataclass(eq=False)
class Sentence:
    utterance: int
    index: int
    text: str
    config: StreamingSpeechSessionConfig
    payload: dict[str, Any] | GatewayError | None  # None: never sent (``precheck_error``)
    cut_at: float  # when its text was complete
    precheck_error: str | None = None  # answered with this error alone (the worker's word_timestamps check)
    audio: SentenceAudio | None = None
    placement_seen: bool = False
    sent_pcm: int = 0  # PCM bytes of it the client has been sent
    # Set once it is sent upstream: the delivery may reach it first (it waits for the window).
    dispatched: asyncio.Event = field(default_factory=asyncio.Event)

    def remaining_s(self) -> float:
        """Audio of it not yet sent: what is buffered, plus an estimate of what is not made yet."""
        audio = self.audio
        if audio is None or self.precheck_error is not None:
            return 0.0 if self.precheck_error is not None else audio_seconds_for(len(self.text))
        received = pcm_seconds(audio.received_bytes)
        total = received if audio.ended else max(received, audio_seconds_for(len(self.text)))
        return max(0.0, total - pcm_seconds(self.sent_pcm))


@dataclass(eq=False)
class UtteranceEnd:
    utterance: int
    total_sentences: int


Entry = Sentence | UtteranceEnd


@dataclass
class _Sent:
    bytes_by_utterance: dict[int, int] = field(default_factory=dict)

    def add(self, utterance: int, count: int) -> None:
        self.bytes_by_utterance[utterance] = self.bytes_by_utterance.get(utterance, 0) + count


class SentencePipeline:
    def __init__(
        self,
        outbox: Outbox,
        upstream: SentenceUpstream,
        encoders: EncoderFactory,
        observer: SessionObserver,
        *,
        debug: Callable[[], bool] = lambda: False,
        trace: SessionTrace = UNTRACED_SESSION,
        lookahead_s: float = DEFAULT_LOOKAHEAD_S,
        key: SessionKey | None = None,
    ) -> None:
        self._outbox = outbox
        self._upstream = upstream
        self._clock = upstream.clock
        self._encoders = encoders
        self._observer = observer
        self._debug = debug  # the session's `gateway_debug`: routing in audio.start
        self._trace = trace  # each sentence's request id and trace headers (spans when tracing)
        self._lookahead_s = lookahead_s
        self._streams = SessionStreams(key if key is not None else UnlimitedKey())
        self.budget = AudioBudget(round(lookahead_s * BYTES_PER_SECOND), observer.audio_buffered)
        self._look_again: asyncio.TimerHandle | None = None  # when the next sentence enters the window
        self._entries: deque[Entry] = deque()
        self._more = asyncio.Event()
        self._delivery: asyncio.Task[None] | None = None
        self._playback = Playback()
        self._sent = _Sent()
        self._closed = False
        # When the last entry was delivered, on the event loop's clock (the one the session's
        # idle timer runs on); None: nothing yet.
        self._delivered_at: float | None = None

    @property
    def busy(self) -> bool:
        """Audio or answers still to deliver (the session's idle timer does not run)."""
        return bool(self._entries)

    def idle_for(self) -> float:
        """Seconds since the last delivery, with nothing left to deliver (0 while busy;
        infinite before the first: then only the time since the client's last message counts)."""
        if self._entries:
            return 0.0
        if self._delivered_at is None:
            return math.inf
        return asyncio.get_running_loop().time() - self._delivered_at

    @property
    def queued_sentences(self) -> int:
        """Sentences cut and not yet sent to a worker."""
        return sum(1 for entry in self._entries if isinstance(entry, Sentence) and entry.audio is None)

    @property
    def queued_chars(self) -> int:
        """Their text."""
        return sum(len(entry.text) for entry in self._entries if isinstance(entry, Sentence) and entry.audio is None)

    def add(self, sentence: Sentence) -> None:
        self._entries.append(sentence)
        self._wake()
        self._progress()

    def end_utterance(self, utterance: int, total_sentences: int) -> None:
        self._entries.append(UtteranceEnd(utterance, total_sentences))
        self._wake()

    async def cancel(self) -> dict[int, int]:
        """Barge-in: stop every queued utterance. Returns, per utterance stopped (in order),
        the bytes of it the client was sent."""
        sent = self._sent.bytes_by_utterance
        # Queued ones, and the open one whose sentences so far are all delivered (waiting for
        # text): its bytes are counted until its end is delivered.
        utterances = sorted({entry.utterance for entry in self._entries} | sent.keys())
        await self._stop_everything()
        # The listener's player drops what it had not played yet: the next utterance plays
        # at once, so its first sentence is dispatched now, not once the cancelled audio
        # would have played out (which held it back by all of that audio past the window).
        self._playback = Playback()
        return {utterance: sent.pop(utterance, 0) for utterance in utterances}

    async def close(self) -> None:
        """The session ended: nothing more is sent or requested; every slot is freed."""
        self._closed = True
        await self._stop_everything()

    # --- dispatch -----------------------------------------------------------------------

    def look_again(self) -> None:
        """Time passed (the player moved on): dispatch what entered the window."""
        self._look_again = None
        self._progress()

    def _progress(self) -> None:
        """A sentence was added, placed, got audio or ended, or audio was sent: report
        placements, dispatch more."""
        if self._closed:
            return
        now = self._clock()
        ahead = 0.0  # audio still to reach the client before the sentence looked at
        for entry in self._entries:
            if isinstance(entry, UtteranceEnd) or entry.precheck_error is not None:
                continue
            audio = entry.audio
            if audio is None:
                due_in = self._playback.due_in(now, ahead)
                if due_in > self._lookahead_s:
                    self._wake_in(due_in - self._lookahead_s)
                elif not self._outbox.blocked:  # paused while the client is not reading
                    self._dispatch(entry, now, ahead)
                return
            if audio.decision is not None and not entry.placement_seen:
                self._placed(entry, audio)
            if not audio.first_audio and not audio.ended:
                return  # it is the one waiting for its first audio: the next waits for it
            ahead += entry.remaining_s()

    def _wake_in(self, seconds: float) -> None:
        if self._look_again is not None:
            self._look_again.cancel()
        self._look_again = asyncio.get_running_loop().call_later(seconds, self.look_again)

    def _dispatch(self, sentence: Sentence, now: float, ahead_s: float) -> None:
        chars = len(sentence.text)
        if sentence.index == 0:
            # What the listener waits for: routed as a `latency` request.
            request = RequestInfo(SlaClass.LATENCY, None, chars)
        else:
            request = RequestInfo(SlaClass.BALANCED, None, chars, deadline_s=self._playback.due_in(now, ahead_s))
        assert sentence.payload is not None
        trace = functools.partial(self._trace.sentence, sentence.utterance, sentence.index)
        sentence.audio = audio = SentenceAudio(self._upstream, request, sentence.payload, self._progress, trace, self.budget, self._streams)
        audio.start()
        sentence.dispatched.set()

    def _placed(self, sentence: Sentence, audio: SentenceAudio) -> None:
        sentence.placement_seen = True
        decision = audio.decision
        assert decision is not None and decision.pool is not None and audio.dispatched_at is not None
        self._observer.sentence_routed(decision.pool, decision.reason)
        predicted = audio.predicted_start_at
        deadline = audio.request.deadline_s
        log.info(
            "session sentence %d.%d placed on %s (%s): predicted first audio in %s ms, deadline %s ms",
            sentence.utterance, sentence.index, decision.worker_id, decision.reason,
            "?" if predicted is None else f"{(predicted - audio.dispatched_at) * 1000:.0f}",
            "none" if deadline is None else f"{deadline * 1000:.0f}",
        )  # fmt: skip

    # --- delivery -----------------------------------------------------------------------

    def _wake(self) -> None:
        if self._closed:
            return
        if self._delivery is None or self._delivery.done():
            self._delivery = asyncio.create_task(self._deliver(), name="session-delivery")
        self._more.set()

    async def _deliver(self) -> None:
        try:
            while True:
                while not self._entries:
                    self._more.clear()
                    await self._more.wait()
                entry = self._entries[0]
                self.budget.delivering(entry.audio if isinstance(entry, Sentence) else None)
                if isinstance(entry, UtteranceEnd):
                    await self._outbox.send_json(messages.session_done(entry.utterance, entry.total_sentences))
                    self._sent.bytes_by_utterance.pop(entry.utterance, None)
                else:
                    await self._deliver_sentence(entry)
                self._entries.popleft()
                self._delivered_at = asyncio.get_running_loop().time()
                self._progress()
        except SocketClosed:
            pass  # the client is gone: the session's receive loop sees it and closes everything

    async def _deliver_sentence(self, sentence: Sentence) -> None:
        outbox, config = self._outbox, sentence.config
        if sentence.precheck_error is not None:
            await outbox.send_json(messages.error(sentence.precheck_error))
            return
        if sentence.audio is None:
            await sentence.dispatched.wait()  # a player still that far from it: the window opens later
        audio = sentence.audio
        assert audio is not None
        self.budget.delivering(audio)
        start = messages.audio_start(sentence.utterance, sentence.index, sentence.text, config.response_format, config.stream_audio)
        if self._debug():
            await audio.placed.wait()  # the routing is what the field is for
            start["gateway"] = self._routing(audio)
        await outbox.send_json(start)
        streamed = config.stream_audio
        encoder = None if streamed else self._encoders(AudioFormat(config.response_format), config.speed or 1.0)
        total, failed, parts, pcm = 0, False, [], 0
        try:
            async for chunk in audio.chunks():
                if encoder is None:
                    await outbox.send_bytes(chunk)
                    total += len(chunk)
                    self._delivered(sentence, len(chunk), len(chunk))
                else:
                    parts.append(encoder.encode(chunk))
                    pcm += len(chunk)
            if encoder is not None:
                parts.append(encoder.finish())
                body = b"".join(parts)
                if config.response_format == "wav":
                    body = _sized_wav(body)
                await outbox.send_bytes(body)
                total = len(body)
                self._delivered(sentence, pcm, total)
        except SentenceFailed as exc:
            failed = True
            reason = messages.generation_failed(sentence.utterance, sentence.index, exc.reason)
            await outbox.send_json(messages.error(reason, partial_audio=total > 0))
        finally:
            if encoder is not None:
                encoder.close()
        await outbox.send_json(messages.audio_done(sentence.utterance, sentence.index, total, failed))

    def _delivered(self, sentence: Sentence, pcm_bytes: int, sent_bytes: int) -> None:
        now = self._clock()
        first = sentence.sent_pcm == 0
        gap = self._playback.delivered(now, pcm_seconds(pcm_bytes))
        sentence.sent_pcm += pcm_bytes
        self._sent.add(sentence.utterance, sent_bytes)
        self._progress()  # a send completed: a dispatch paused by a blocked one may go now
        if not first:
            return
        if sentence.index == 0:
            self._observer.utterance_first_audio(now - sentence.cut_at)
        else:
            self._observer.sentence_gap(gap)

    def _routing(self, audio: SentenceAudio) -> dict[str, Any]:
        """The `gateway_debug` field of audio.start: where the sentence went and why."""
        decision, deadline, predicted = audio.decision, audio.request.deadline_s, audio.predicted_start_at
        return {
            "pool": None if decision is None or decision.pool is None else decision.pool.value,
            "reason": None if decision is None else decision.reason,
            "deadline_ms": None if deadline is None else round(deadline * 1000),
            "predicted_start_ms": None if predicted is None or audio.dispatched_at is None else round((predicted - audio.dispatched_at) * 1000),
        }

    # --- stopping -------------------------------------------------------------------------

    async def _stop_everything(self) -> None:
        if self._look_again is not None:
            self._look_again.cancel()
            self._look_again = None
        delivery, self._delivery = self._delivery, None
        if delivery is not None and not delivery.done():
            delivery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await delivery
        audios = [entry.audio for entry in self._entries if isinstance(entry, Sentence) and entry.audio is not None]
        self._entries.clear()  # before the cancels: their last progress call finds nothing to dispatch
        await asyncio.gather(*(audio.cancel() for audio in audios))
        for audio in audios:
            audio.discard()  # ended on their own, with audio never sent
        self.budget.delivering(None)


def _sized_wav(body: bytes) -> bytes:
    """A whole-file WAV: the streaming header's unknown sizes filled in (the worker sends
    one complete file per sentence)."""
    if len(body) < WAV_HEADER_BYTES or body[:4] != b"RIFF":
        return body
    return body[:4] + struct.pack("<I", len(body) - 8) + body[8:40] + struct.pack("<I", len(body) - WAV_HEADER_BYTES) + body[WAV_HEADER_BYTES:]
