"""The Pipecat TTS service over the gateway's sessions (``gateway.integrations.pipecat``) in
a real Pipecat pipeline (its test runner) against a real gateway over emulated workers:
an LLM reply streamed in tokens is spoken in full, and an interruption mid-reply drops the
rest of it on the same socket while the next reply plays clean.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import BYTES_PER_SECOND, worker_pcm
from tests.support.stack import Stack, running_stack

pytest.importorskip("pipecat", reason="pipecat-ai comes with the clients extra")

from pipecat.frames.frames import (  # noqa: E402
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
)
from pipecat.tests.utils import SleepFrame, run_test  # noqa: E402

from gateway.integrations.pipecat import HiggsSessionTTSService  # noqa: E402

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Then it naps in the warm afternoon sun.",
    "At dusk it trots home across the fields.",
)
SEED = 42  # the workers' default: the reference audio is asked for without one
# Pipecat's test runner ends the pipeline a fixed time after the last frame: long enough for
# the last reply's audio on a busy machine (1 s was not, under a full suite on 2 cores).
SETTLE_S = 5.0
LONG = " ".join(["Now a much longer reply that the listener will interrupt halfway through."] * 24)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("pipecat"), ll_workers=1, ht_workers=1, time_scale=0.02) as running:
        yield running


def seconds(stack: Stack, text: str) -> float:
    return len(worker_pcm(stack.workers["low_latency"][0].url, text)) / BYTES_PER_SECOND


def reply(text: str, size: int = 6) -> list:
    """An LLM's reply as Pipecat carries it: start, tokens, end."""
    tokens = [LLMTextFrame(text[i : i + size]) for i in range(0, len(text), size)]
    return [LLMFullResponseStartFrame(), *tokens, LLMFullResponseEndFrame()]


def audio_by_context(frames: list) -> dict[str, float]:
    heard: dict[str, float] = {}
    for frame in frames:
        if isinstance(frame, TTSAudioRawFrame):
            assert frame.sample_rate == 24_000
            heard[frame.context_id] = heard.get(frame.context_id, 0.0) + frame.num_frames / 24_000
    return heard


async def test_a_streamed_reply_is_spoken_in_full(stack: Stack) -> None:
    service = HiggsSessionTTSService(base_url=stack.url, voice="alloy", session_config={"seed": SEED})
    down, _ = await run_test(service, frames_to_send=[*reply(" ".join(SENTENCES)), SleepFrame(SETTLE_S)])
    heard = audio_by_context(down)
    assert len(heard) == 1, heard
    want = sum(seconds(stack, sentence) for sentence in SENTENCES)
    got = next(iter(heard.values()))
    assert abs(got - want) <= 0.05, f"{got:.3f} s heard, {want:.3f} s expected"
    assert service.connects == 1


async def test_an_interruption_drops_the_reply_and_keeps_the_socket(stack: Stack) -> None:
    service = HiggsSessionTTSService(base_url=stack.url, voice="alloy", session_config={"seed": SEED})
    frames = [*reply(LONG), SleepFrame(0.1), InterruptionFrame(), *reply(SENTENCES[0]), SleepFrame(SETTLE_S)]
    down, _ = await run_test(service, frames_to_send=frames)
    heard = audio_by_context(down)
    assert len(heard) == 2, heard
    first_context = next(iter(heard))
    interrupted, after = heard.values()  # insertion order: the first reply's context first
    assert 0 < interrupted < seconds(stack, LONG) / 2, f"{interrupted:.3f} s of the interrupted reply"
    cut = next(i for i, frame in enumerate(down) if isinstance(frame, InterruptionFrame))
    stale = [f for f in down[cut:] if isinstance(f, TTSAudioRawFrame) and f.context_id == first_context]
    assert not stale, f"{len(stale)} frames of the interrupted reply after the interruption"
    assert abs(after - seconds(stack, SENTENCES[0])) <= 0.05, f"{after:.3f} s after the interruption"
    assert service.connects == 1, "the interruption must not cost a reconnect"
