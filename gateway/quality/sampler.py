"""Which completed streams are scored, and the scoring thread that keeps it off the request path.

The relay hands every stream it opens to ``tap``; a sampled one gets a ``PcmTap`` that keeps a
reference to each chunk the relay already holds (no copy, a list append per second of audio)
up to ``max_seconds``. When the stream ends whole, the chunks go on a bounded queue to one
scoring thread; a full queue drops the sample and counts it, so a busy gateway only scores
less and the relay never waits. Results come back to the event loop for the judge.

Sampling is deterministic per worker (every 1/share-th stream, by an accumulator): a small
share still scores a worker's first streams soon, and tests need no random seed. A share
is also capped in time (``max_per_s`` per worker): at a few hundred short streams a second
a tenth is dozens of clips, whose scoring takes the event loop's core (and its GIL) from
the requests, while the judge's window fills as well from one clip a second. With a
word error rate on (quality.wer), a second accumulator picks ``wer_share`` of the sampled
streams to keep their input text; their clips also go to the transcriber, which has its own
bound (``gateway.quality.transcriber``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, MutableMapping, Set
from dataclasses import dataclass, replace
from typing import Any

from gateway.quality.score import Score, score_pcm
from gateway.types import PoolName
from gateway.types.codec import SAMPLE_RATE

log = logging.getLogger("higgs_gateway.quality")

BYTES_PER_SECOND = SAMPLE_RATE * 2


@dataclass(frozen=True, slots=True)
class Sample:
    """One stream to score: whose it was, under what load, and when it was dispatched."""

    worker_id: str
    pool: PoolName
    # The most requests the worker carried while it made this clip (ours included, from
    # dispatch to the end): the decode batch the audio came out of, as the gateway sees it.
    load: int
    dispatched_at: float
    text_chars: int
    probe: bool = False
    # The input text, when this stream is also transcribed for a word error rate (quality.wer).
    text: str | None = None


Deliver = Callable[[Sample, Score], None]


class PcmTap:
    """The PCM of one sampled stream, as the relay reads it."""

    __slots__ = ("_sampler", "_sample", "_chunks", "_room")

    def __init__(self, sampler: QualitySampler, sample: Sample, max_bytes: int) -> None:
        self._sampler = sampler
        self._sample = sample
        self._chunks: list[bytes] = []
        self._room = max_bytes

    def add(self, chunk: bytes) -> None:
        if self._room > 0:
            self._chunks.append(chunk if len(chunk) <= self._room else chunk[: self._room])
            self._room -= len(chunk)

    def finished(self, completed: bool, peak_load: int) -> None:
        """The stream ended: only a whole clip is judged (a cut one says nothing of quality)."""
        chunks, self._chunks = self._chunks, []
        if completed:
            sample = replace(self._sample, load=max(peak_load, self._sample.load))
            if self._room <= 0:  # cut at max_seconds: the text says more than the clip holds
                sample = replace(sample, text=None)
            self._sampler.submit(sample, chunks)


def drop_absent(present: Set[str], *kept: MutableMapping[str, Any]) -> None:
    """Remove from each of ``kept`` (keyed by worker id) the workers not in ``present``."""
    for entries in kept:
        for worker_id in [w for w in entries if w not in present]:
            del entries[worker_id]


class QualitySampler:
    def __init__(
        self,
        share: float,
        *,
        min_seconds: float,
        max_seconds: float,
        max_pending: int,
        deliver: Deliver,
        on_dropped: Callable[[], None],
        score: Callable[[bytes], Score] = score_pcm,
        wer_share: float = 0.0,
        transcribe: Callable[[Sample, list[bytes]], object] | None = None,
        max_per_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``transcribe``: where a clip with its text goes for a word error rate (quality.wer),
        ``wer_share`` of the sampled streams, per worker; None: no rate. ``max_per_s``: at
        most this many sampled streams per second per worker (0: no cap)."""
        self._share = share
        self._min_interval_s = 1.0 / max_per_s if max_per_s > 0 else 0.0
        self._clock = clock
        self._last_taken: dict[str, float] = {}
        self._wer_share = wer_share
        self._transcribe = transcribe
        self._wer_credit: dict[str, float] = {}
        self._score = score
        self._min_bytes = int(min_seconds * BYTES_PER_SECOND)
        self._max_bytes = int(max_seconds * BYTES_PER_SECOND)
        self._deliver = deliver
        self._on_dropped = on_dropped
        self._credit: dict[str, float] = {}
        self._queue: queue.Queue[tuple[Sample, list[bytes]] | None] = queue.Queue(max_pending)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="quality-scorer", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        while True:  # make room for the stop mark: pending samples are not worth the wait
            try:
                self._queue.put_nowait(None)
                break
            except queue.Full:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    pass
        await asyncio.to_thread(thread.join, 5.0)

    def tap(self, worker_id: str, pool: PoolName, load: int, dispatched_at: float, text: str) -> PcmTap | None:
        """A tap when this stream is sampled, else None (the relay's only cost: this call)."""
        if self._thread is None:
            return None
        if not self._take(self._credit, worker_id, self._share):  # a worker's first stream is sampled
            return None
        if self._min_interval_s:
            now, last = self._clock(), self._last_taken.get(worker_id)
            if last is not None and now - last < self._min_interval_s:
                return None
            self._last_taken[worker_id] = now
        heard = self._transcribe is not None and self._take(self._wer_credit, worker_id, self._wer_share)
        sample = Sample(worker_id, pool, load, dispatched_at, len(text), text=text if heard and text else None)
        return PcmTap(self, sample, self._max_bytes)

    def forget_absent(self, present: Set[str]) -> None:
        """Drop what is kept per worker for workers no longer in the fleet (bounded memory
        under discovery and scale-down, where every new worker brings a new id)."""
        drop_absent(present, self._credit, self._wer_credit, self._last_taken)

    @staticmethod
    def _take(credits: dict[str, float], worker_id: str, share: float) -> bool:
        """Every 1/share-th call per worker, the first one included."""
        credit = credits.get(worker_id, 1.0 - share) + share
        if credit < 1.0:
            credits[worker_id] = credit
            return False
        credits[worker_id] = credit - 1.0
        return True

    def submit(self, sample: Sample, chunks: list[bytes]) -> None:
        """Queue a finished clip for scoring; dropped (and counted) when the scorer is behind."""
        if self._thread is None or sum(map(len, chunks)) < self._min_bytes:
            return
        if sample.text is not None and self._transcribe is not None:
            self._transcribe(sample, chunks)  # its own bound: dropped and counted there
        try:
            self._queue.put_nowait((sample, chunks))
        except queue.Full:
            self._on_dropped()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            sample, chunks = item
            try:
                score = self._score(b"".join(chunks))
            except Exception:  # a scoring bug must not stop the thread
                log.exception("scoring a sample of %s failed", sample.worker_id)
                continue
            loop = self._loop
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self._deliver, sample, score)
                except RuntimeError:  # the loop closed meanwhile
                    return
