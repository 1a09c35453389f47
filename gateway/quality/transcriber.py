"""The recogniser in a child process of its own, fed through a bounded queue.

Recognition costs about a CPU second per second of audio and holds the interpreter while it
runs, so it never runs in the gateway's process: one spawned child (a fresh interpreter, no
inherited loop or threads) loads the decoder once and transcribes clips one at a time; the
word error rate against the input text is computed there too. The gateway's side only
hands over the clip's chunks (pickled by the queue's feeder thread) and reads the results on
a reader thread, which passes them to the event loop.

At most ``max_pending`` clips are in the child's hands (the one being decoded included); a
new sample past that is dropped and counted, never queued without bound: a busy recogniser
measures less, nothing waits for it. A child that dies is started again (its clips lost,
logged); one that dies before it loaded its model is not, and the rate stays off.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from gateway.quality.wer import WordErrors, word_errors
from gateway.types.codec import BYTES_PER_SECOND

if TYPE_CHECKING:
    from gateway.quality.sampler import Sample

log = logging.getLogger("higgs_gateway.quality")

_READY = -1  # the child loaded its decoder
_FAILED_TO_LOAD = -2  # the child could not: the message follows, the child exits
_POLL_S = 0.25  # how often the reader looks whether the child still lives


@dataclass(frozen=True, slots=True)
class Transcript:
    """One clip heard: its word errors (None: the text had no word) and what it cost."""

    errors: WordErrors | None
    audio_s: float
    cpu_s: float  # the child's CPU time for this clip (resampling, decoding, aligning)


def transcribe_clip(recogniser: Any, chunks: list[bytes], text: str) -> Transcript:
    start = time.process_time()
    pcm = b"".join(chunks)
    errors = word_errors(text, recogniser.transcribe(pcm))
    return Transcript(errors, len(pcm) / BYTES_PER_SECOND, time.process_time() - start)


def serve(jobs: Any, results: Any) -> None:
    """The child: load the decoder, then transcribe each job until the stop mark (None)."""
    try:
        from gateway.quality.recogniser import Recogniser

        recogniser = Recogniser()
    except Exception as exc:
        results.put((_FAILED_TO_LOAD, f"{type(exc).__name__}: {exc}"))
        return
    results.put((_READY, None))
    while (job := jobs.get()) is not None:
        number, chunks, text = job
        try:
            results.put((number, transcribe_clip(recogniser, chunks, text)))
        except Exception as exc:  # one bad clip must not end the child
            results.put((number, f"{type(exc).__name__}: {exc}"))


Deliver = Callable[["Sample", Transcript], None]


class _Child:
    """One child process, its two queues and the thread reading its results."""

    def __init__(self, on_result: Callable[[int, object], None], on_exit: Callable[[_Child], None], target: Callable[..., None]) -> None:
        context = multiprocessing.get_context("spawn")
        self.jobs: Any = context.Queue()
        self.results: Any = context.Queue()
        self.process: BaseProcess = context.Process(
            target=target, args=(self.jobs, self.results), name="higgs-recogniser", daemon=True
        )
        self.loaded = False
        self.stopping = False
        self._on_result = on_result
        self._on_exit = on_exit
        self.process.start()
        self._reader = threading.Thread(target=self._read, name="recogniser-results", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                number, result = self.results.get(timeout=_POLL_S)
            except queue.Empty:
                if self.stopping or not self.process.is_alive():
                    break
                continue
            except (EOFError, OSError):
                break
            if number == _READY:
                self.loaded = True
            self._on_result(number, result)
        if not self.stopping:
            self._on_exit(self)

    def stop(self, timeout_s: float) -> None:
        """The stop mark, a wait for the child, then SIGTERM if it is still decoding."""
        self.stopping = True
        self.jobs.cancel_join_thread()  # jobs it never read are not worth the wait
        try:
            self.jobs.put(None)
        except (ValueError, OSError):
            pass
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout_s)
        self._reader.join(timeout_s)
        self.jobs.close()
        self.results.close()


class Transcriber:
    """Clips to the recogniser's child; transcripts back on the event loop to ``deliver``."""

    def __init__(
        self,
        max_pending: int,
        *,
        deliver: Deliver,
        on_dropped: Callable[[], None],
        target: Callable[..., None] = serve,
    ) -> None:
        self._max_pending = max_pending
        self._deliver = deliver
        self._on_dropped = on_dropped
        self._target = target
        self._numbers = itertools.count()
        # number -> the sample it measures, or the future a re-test awaits.
        self._pending: dict[int, Sample | asyncio.Future[Transcript | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._child: _Child | None = None
        self.unavailable: str | None = None  # why the child could not load its model

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def running(self) -> bool:
        return self._child is not None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._child = self._spawn()

    async def stop(self, timeout_s: float = 5.0) -> None:
        child, self._child = self._child, None
        if child is not None:
            await asyncio.to_thread(child.stop, timeout_s)
        self._fail_pending()

    def submit(self, sample: Sample, chunks: list[bytes]) -> bool:
        """Queue a sampled clip with its input text; dropped (counted) past ``max_pending``.
        On the event loop; never waits."""
        child = self._child
        if child is None or sample.text is None:
            return False
        if len(self._pending) >= self._max_pending:
            self._on_dropped()
            return False
        number = next(self._numbers)
        self._pending[number] = sample
        child.jobs.put((number, chunks, sample.text))
        return True

    async def transcribe(self, chunks: list[bytes], text: str) -> Transcript | None:
        """One clip heard, waited for (a half-open re-test): past the bound too, never dropped.
        None when the recogniser is not running or failed on it."""
        child, loop = self._child, asyncio.get_running_loop()
        if child is None:
            return None
        number = next(self._numbers)
        future: asyncio.Future[Transcript | None] = loop.create_future()
        self._pending[number] = future
        child.jobs.put((number, chunks, text))
        return await future

    def _spawn(self) -> _Child:
        return _Child(self._from_child, self._child_exited, self._target)

    def _from_child(self, number: int, result: object) -> None:  # on the reader thread
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._settle, number, result)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def _settle(self, number: int, result: object) -> None:
        if number == _READY:
            log.info("recogniser loaded (PocketSphinx, the model its package ships)")
            return
        if number == _FAILED_TO_LOAD:
            self.unavailable = str(result)
            log.error("the recogniser could not load, no word error rate will be measured: %s", result)
            return
        waiting = self._pending.pop(number, None)
        transcript = result if isinstance(result, Transcript) else None
        if transcript is None:
            log.warning("transcribing a clip failed: %s", result)
        if isinstance(waiting, asyncio.Future):
            if not waiting.done():
                waiting.set_result(transcript)
        elif waiting is not None and transcript is not None:
            self._deliver(waiting, transcript)

    def _child_exited(self, child: _Child) -> None:  # on the reader thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._restart, child)
            except RuntimeError:
                pass

    def _restart(self, child: _Child) -> None:
        if child is not self._child:
            return  # stopped, or replaced already
        lost = len(self._pending)
        self._fail_pending()
        if not child.loaded:
            self._child = None
            log.error("the recogniser's process ended before it loaded (exit code %s): no word error rate", child.process.exitcode)
            return
        log.warning("the recogniser's process ended (exit code %s), %d clips lost: starting another", child.process.exitcode, lost)
        child.stop(0.1)
        self._child = self._spawn()

    def _fail_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for waiting in pending.values():
            if isinstance(waiting, asyncio.Future) and not waiting.done():
                waiting.set_result(None)
