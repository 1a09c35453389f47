"""The Pipecat TTS service over the gateway's sessions (``gateway.integrations.pipecat``) in
a real Pipecat pipeline against a real gateway over emulated workers: an LLM reply streamed
in tokens is spoken in full, and an interruption mid-reply drops the rest of it on the same
socket while the next reply plays clean.

The pipeline is driven by what it says, not by a clock: the interruption comes once the
first reply is heard, and the pipeline ends once the last reply's ``TTSStoppedFrame`` is
out (the service sends it on the gateway's ``session.done``; Pipecat's own end-of-audio
timer is set beyond the tests' wait, so it can never be what ended a reply).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import pytest

from tests.integration.conftest import BYTES_PER_SECOND, worker_pcm
from tests.support.stack import Stack, running_stack

pytest.importorskip("pipecat", reason="pipecat-ai comes with the clients extra")

from pipecat.frames.frames import (  # noqa: E402
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineWorker  # noqa: E402
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor  # noqa: E402
from pipecat.services.tts_service import TextAggregationMode  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

from gateway.integrations.pipecat import HiggsSessionTTSService  # noqa: E402

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Then it naps in the warm afternoon sun.",
    "At dusk it trots home across the fields.",
)
SEED = 42  # the workers' default: the reference audio is asked for without one
LONG = " ".join(f"Sentence {n} of a much longer reply that the listener will interrupt." for n in range(1, 25))
WAIT_S = 60.0  # the most any step may take on a loaded machine; passing runs take a fraction


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("pipecat"), ll_workers=1, ht_workers=1, time_scale=0.02) as running:
        yield running


def seconds(stack: Stack, text: str) -> float:
    return len(worker_pcm(stack.workers["low_latency"][0].url, text)) / BYTES_PER_SECOND


def reply(text: str, size: int = 6) -> list[Frame]:
    """An LLM's reply as Pipecat carries it: start, tokens, end."""
    tokens = [LLMTextFrame(text[i : i + size]) for i in range(0, len(text), size)]
    return [LLMFullResponseStartFrame(), *tokens, LLMFullResponseEndFrame()]


def service(stack: Stack, **kwargs: object) -> HiggsSessionTTSService:
    return HiggsSessionTTSService(
        base_url=stack.url, voice="alloy", session_config={"seed": SEED}, stop_frame_timeout_s=2 * WAIT_S, **kwargs
    )


class Heard(FrameProcessor):
    """Every frame that passed it going ``direction``, and a wait on them."""

    def __init__(self, direction: FrameDirection = FrameDirection.DOWNSTREAM) -> None:
        super().__init__()
        self.direction = direction
        self.frames: list[Frame] = []
        self._changed = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction is self.direction:
            self.frames.append(frame)
            self._changed.set()
        await self.push_frame(frame, direction)

    async def until(self, what: str, predicate: Callable[[list[Frame]], bool]) -> None:
        try:
            async with asyncio.timeout(WAIT_S):
                while not predicate(self.frames):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"not within {WAIT_S} s: {what}") from None

    def stops(self) -> list[str]:
        return [frame.context_id for frame in self.frames if isinstance(frame, TTSStoppedFrame) and frame.context_id]


@asynccontextmanager
async def pipeline(tts: HiggsSessionTTSService) -> AsyncIterator[tuple[PipelineWorker, Heard, Heard]]:
    """``tts`` between a ``Heard`` of what goes up (errors) and one of what comes down;
    ended with an ``EndFrame`` on exit."""
    up, heard = Heard(FrameDirection.UPSTREAM), Heard()
    worker = PipelineWorker(Pipeline([up, tts, heard]), cancel_on_idle_timeout=False)
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker: PipelineWorker, frame: Frame) -> None:
        started.set()

    runner = WorkerRunner()
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        async with asyncio.timeout(WAIT_S):
            await started.wait()
        yield worker, heard, up
        await worker.queue_frame(EndFrame())
        async with asyncio.timeout(WAIT_S):
            await running
    finally:
        if not running.done():
            running.cancel()


def audio_by_context(frames: list[Frame]) -> dict[str, float]:
    heard: dict[str, float] = {}
    for frame in frames:
        if isinstance(frame, TTSAudioRawFrame) and frame.context_id:  # not the silence after a stop
            assert frame.sample_rate == 24_000
            heard[frame.context_id] = heard.get(frame.context_id, 0.0) + frame.num_frames / 24_000
    return heard


def errors(frames: list[Frame]) -> list[str]:
    return [frame.error for frame in frames if isinstance(frame, ErrorFrame)]


@pytest.mark.parametrize("mode", [None, TextAggregationMode.TOKEN], ids=["sentences", "tokens"])
async def test_a_streamed_reply_is_spoken_in_full(stack: Stack, mode: TextAggregationMode | None) -> None:
    """Pipecat's sentences (its default), and its tokens handed on as they come."""
    tts = service(stack) if mode is None else service(stack, text_aggregation_mode=mode)
    async with pipeline(tts) as (worker, heard, up):
        await worker.queue_frames(reply(" ".join(SENTENCES)))
        await heard.until("the reply's end", lambda frames: len(heard.stops()) == 1)
    spoken = audio_by_context(heard.frames)
    assert list(spoken) == heard.stops(), spoken
    want = sum(seconds(stack, sentence) for sentence in SENTENCES)
    got = spoken[heard.stops()[0]]
    assert abs(got - want) <= 0.05, f"{got:.3f} s heard, {want:.3f} s expected"
    assert not errors(up.frames), errors(up.frames)
    assert tts.connects == 1


async def test_an_interruption_drops_the_reply_and_keeps_the_socket(stack: Stack) -> None:
    """The rest of the interrupted reply's tokens are still in the service's queue when the
    interruption comes (put there in one go, so the interruption, a system frame, overtakes
    them): they come after it, and must not be spoken."""
    tts = service(stack)
    first_half, rest = reply(LONG)[:-1], reply(LONG)[-1:]
    first_half, rest = first_half[: len(first_half) // 2], first_half[len(first_half) // 2 :] + rest
    async with pipeline(tts) as (worker, heard, up):
        await worker.queue_frames(first_half)
        await heard.until("the first reply's audio", lambda frames: bool(audio_by_context(frames)))
        first_context = next(iter(audio_by_context(heard.frames)))
        for frame in [*rest, InterruptionFrame()]:  # the user speaks while the LLM still streams
            await tts.queue_frame(frame)
        await worker.queue_frames(reply(SENTENCES[0]))
        await heard.until("the second reply's end", lambda frames: any(c != first_context for c in heard.stops()))
    spoken = audio_by_context(heard.frames)
    assert len(spoken) == 2, spoken
    interrupted, after = spoken[first_context], spoken[heard.stops()[-1]]
    assert 0 < interrupted < seconds(stack, LONG) / 2, f"{interrupted:.3f} s of the interrupted reply"
    cut = next(i for i, frame in enumerate(heard.frames) if isinstance(frame, InterruptionFrame))
    stale = [f for f in heard.frames[cut:] if isinstance(f, TTSAudioRawFrame) and f.context_id == first_context]
    assert not stale, f"{len(stale)} frames of the interrupted reply after the interruption"
    assert abs(after - seconds(stack, SENTENCES[0])) <= 0.05, f"{after:.3f} s after the interruption"
    assert not errors(up.frames), errors(up.frames)
    assert tts.connects == 1, "the interruption must not cost a reconnect"
