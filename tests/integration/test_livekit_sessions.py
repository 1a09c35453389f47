"""The LiveKit TTS over the gateway's sessions (``gateway.integrations.livekit``), driven
through LiveKit's own ``SynthesizeStream`` against a real gateway over emulated workers:
a streamed three-sentence reply is spoken in full, an interruption drops the rest of the
reply on the same socket, and the next reply plays clean.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.integration.conftest import BYTES_PER_SECOND, worker_pcm
from tests.support.stack import Stack, running_stack

pytest.importorskip("livekit.agents", reason="livekit-agents comes with the clients extra")

from gateway.integrations.livekit import TTS, estimated_words  # noqa: E402

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Then it naps in the warm afternoon sun.",
    "At dusk it trots home across the fields.",
)
SEED = 42  # the workers' default: the reference audio below is asked for without one
LONG = " ".join(["Now a much longer reply that the listener will interrupt halfway through."] * 8)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("livekit"), ll_workers=1, ht_workers=1, time_scale=0.02) as running:
        yield running


def seconds(stack: Stack, text: str) -> float:
    return len(worker_pcm(stack.workers["low_latency"][0].url, text)) / BYTES_PER_SECOND


async def speak(plugin: TTS, pieces: list[str]) -> int:
    """Stream ``pieces`` the way AgentSession does; returns the samples heard."""
    samples = 0
    async with plugin.stream() as stream:
        for piece in pieces:
            stream.push_text(piece)
        stream.end_input()
        async for event in stream:
            assert event.frame.sample_rate == 24_000
            samples += event.frame.samples_per_channel
    return samples


def token_pieces(text: str, size: int = 6) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


async def test_a_streamed_reply_is_spoken_sentence_by_sentence(stack: Stack) -> None:
    plugin = TTS(base_url=stack.url, voice="alloy", seed=SEED)
    samples = await speak(plugin, token_pieces(" ".join(SENTENCES)))
    want = sum(seconds(stack, sentence) for sentence in SENTENCES)
    assert abs(samples / 24_000 - want) <= 0.05, f"{samples / 24_000:.3f} s heard, {want:.3f} s expected"
    assert plugin.session.connects == 1
    await plugin.aclose()


async def test_an_interruption_drops_the_reply_on_the_same_socket(stack: Stack) -> None:
    plugin = TTS(base_url=stack.url, voice="alloy", seed=SEED)
    heard = 0
    stream = plugin.stream()
    for piece in token_pieces(LONG):
        stream.push_text(piece)
    stream.end_input()
    async for event in stream:
        heard += event.frame.samples_per_channel
        if heard >= 24_000:  # a second in: the user speaks
            break
    await stream.aclose()  # what AgentSession does on an interruption
    assert heard / 24_000 < seconds(stack, LONG) / 2

    # The next reply, on the same socket, has exactly its own audio: nothing stale before it.
    samples = await speak(plugin, token_pieces(SENTENCES[0]))
    assert abs(samples / 24_000 - seconds(stack, SENTENCES[0])) <= 0.05
    assert plugin.session.connects == 1, "the interruption must not cost a reconnect"
    await plugin.aclose()


async def test_synthesize_speaks_one_text(stack: Stack) -> None:
    plugin = TTS(base_url=stack.url, voice="alloy", seed=SEED)
    frame = await plugin.synthesize(SENTENCES[1]).collect()
    assert abs(frame.samples_per_channel / 24_000 - seconds(stack, SENTENCES[1])) <= 0.05
    await plugin.aclose()


def test_word_timing_is_spread_over_the_sentence_by_characters() -> None:
    words = estimated_words("a bbb", 1.0, 2.0)
    assert [str(w) for w in words] == ["a ", "bbb "]
    assert (words[0].start_time, words[0].end_time, words[1].end_time) == (1.0, 1.5, 3.0)


async def test_an_idle_agent_keeps_its_socket(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # A gateway that ends sessions silent for 3 s, and a keep-alive every 0.2 s: only a keep-alive
    # late by most of the timeout (not a busy machine's scheduling delay) lets the session end.
    import gateway.integrations.session_client as session_client

    monkeypatch.setattr(session_client, "KEEPALIVE_S", 0.2)
    extra = {"sessions": {"idle_timeout_s": 3.0}}
    with running_stack(tmp_path_factory.mktemp("livekit-idle"), 1, 0, time_scale=0.02, extra=extra) as idle_stack:
        plugin = TTS(base_url=idle_stack.url, voice="alloy", seed=SEED)
        assert await speak(plugin, token_pieces(SENTENCES[0])) > 0
        await asyncio.sleep(4.0)  # idle for longer than the gateway's idle timeout
        assert await speak(plugin, token_pieces(SENTENCES[1])) > 0
        assert plugin.session.connects == 1, "the keep-alive held the session open"
        await plugin.aclose()
