"""The clients people point at a TTS server, unchanged, against a real gateway over an
emulated worker: the ``openai`` SDK (sync and async), Pipecat's ``OpenAITTSService``,
LiveKit's ``openai.TTS`` behind the stream adapter ``AgentSession`` wraps it in, Boson's
``boson.TTS`` and openai-agents' ``OpenAITTSModel``.

Each decodes what it got and checks its length against what the worker makes for the
same text, not only a 200. The clients come from the ``clients`` extra (part of ``test``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.conftest import BYTES_PER_SECOND, decode, worker_pcm
from tests.support.stack import Stack, running_stack

TEXT = "The quick brown fox jumps over the lazy dog."
# Two sentences, each long enough that LiveKit's sentence tokenizer keeps them apart.
SENTENCES = ("The quick brown fox jumps over the lazy dog.", "Then it naps in the warm afternoon sun.")
REPLY = " ".join(SENTENCES)
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova",
    "sage", "shimmer", "verse", "marin", "cedar",
)  # fmt: skip
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
# Encoder delay and padding lengthen a lossy clip by a few tens of milliseconds.
TOLERANCE_S = 0.1
UNUSED_KEY = "sk-unused"  # the test gateway asks for no key; every client insists on one


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("clients"), ll_workers=1, ht_workers=0, time_scale=0.02) as running:
        yield running


@pytest.fixture(scope="module")
def seconds_of(stack: Stack) -> dict[str, float]:
    """Seconds of audio the worker makes for each text the tests speak."""
    url = stack.workers["low_latency"][0].url
    return {text: len(worker_pcm(url, text)) / BYTES_PER_SECOND for text in (TEXT, REPLY, *SENTENCES)}


def assert_seconds(got_s: float, want_s: float, what: str, clips: int = 1) -> None:
    """``clips``: how many encoded files make up ``got_s``; each mp3 or aac file carries its
    encoder's priming and padding (tens of ms, docs/audio.md), so the bound is per file."""
    assert want_s > 0.5, "the worker made too little audio for a meaningful check"
    bound = TOLERANCE_S * clips
    assert abs(got_s - want_s) <= bound, f"{what}: {got_s:.3f} s of audio, the worker made {want_s:.3f} s"


def pcm_seconds(pcm: bytes) -> float:
    assert len(pcm) % 2 == 0
    return len(pcm) / BYTES_PER_SECOND


# ---- the openai SDK -----------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_openai_sync_every_format(stack: Stack, seconds_of: dict[str, float], fmt: str) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=UNUSED_KEY, max_retries=0, timeout=30)
    audio = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format=fmt).content
    got = pcm_seconds(audio) if fmt == "pcm" else decode(audio).duration_s
    assert_seconds(got, seconds_of[TEXT], f"openai sync {fmt}")


def test_openai_sync_streaming_every_voice(stack: Stack, seconds_of: dict[str, float]) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=UNUSED_KEY, max_retries=0, timeout=30)
    for voice in OPENAI_VOICES:
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice=voice, input=TEXT, response_format="pcm"
        ) as response:
            pcm = b"".join(response.iter_bytes())
        assert_seconds(pcm_seconds(pcm), seconds_of[TEXT], f"openai voice {voice}")


async def test_openai_async_streaming_and_not_with_instructions(stack: Stack, seconds_of: dict[str, float]) -> None:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=UNUSED_KEY, max_retries=0, timeout=30)
    async with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice="coral", input=TEXT, instructions="Speak in a cheerful tone.", response_format="wav"
    ) as response:
        wav = await response.read()
    assert_seconds(decode(wav).duration_s, seconds_of[TEXT], "openai async streamed wav")
    whole = await client.audio.speech.create(model="gpt-4o-mini-tts", voice="coral", input=TEXT, instructions="Whisper.")
    assert_seconds(decode(whole.content).duration_s, seconds_of[TEXT], "openai async mp3")
    await client.close()


# ---- Pipecat ------------------------------------------------------------------------


async def test_pipecat_openai_tts_service_in_a_pipeline(stack: Stack, seconds_of: dict[str, float]) -> None:
    pytest.importorskip("pipecat", reason="pipecat-ai[openai] comes with the clients extra")
    from pipecat.frames.frames import TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.services.openai.tts import OpenAITTSService
    from pipecat.tests.utils import run_test

    service = OpenAITTSService(
        api_key=UNUSED_KEY,
        base_url=f"{stack.url}/v1",
        settings=OpenAITTSService.Settings(model="gpt-4o-mini-tts", voice="nova"),
        sample_rate=24_000,
    )
    down, _ = await run_test(service, frames_to_send=[TTSSpeakFrame(SENTENCES[0]), TTSSpeakFrame(SENTENCES[1])])
    audio = [frame for frame in down if isinstance(frame, TTSAudioRawFrame)]
    assert audio and {frame.sample_rate for frame in audio} == {24_000}
    got = sum(frame.num_frames for frame in audio) / 24_000
    assert_seconds(got, seconds_of[SENTENCES[0]] + seconds_of[SENTENCES[1]], "pipecat OpenAITTSService")


# ---- LiveKit Agents -----------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-4o-mini-tts", "tts-1"])  # SSE mp3, and a plain mp3 stream
async def test_livekit_openai_tts_through_the_stream_adapter(
    stack: Stack, seconds_of: dict[str, float], model: str
) -> None:
    pytest.importorskip("livekit.plugins.openai", reason="livekit-plugins-openai comes with the clients extra")
    from livekit.agents import tokenize, tts
    from livekit.plugins import openai as livekit_openai

    # What AgentSession does with a TTS that cannot stream (livekit/agents/voice/agent.py).
    wrapped = livekit_openai.TTS(model=model, voice="alloy", base_url=f"{stack.url}/v1", api_key=UNUSED_KEY)
    adapter = tts.StreamAdapter(tts=wrapped, sentence_tokenizer=tokenize.blingfire.SentenceTokenizer(retain_format=True))
    samples = 0
    async with adapter.stream() as stream:
        for sentence in SENTENCES:
            stream.push_text(sentence + " ")
        stream.flush()
        stream.end_input()
        async for event in stream:
            assert event.frame.sample_rate == 24_000 and event.frame.num_channels == 1
            samples += event.frame.samples_per_channel
    await wrapped.aclose()
    # One mp3 request per sentence (LiveKit's default format): two files.
    assert_seconds(
        samples / 24_000, seconds_of[SENTENCES[0]] + seconds_of[SENTENCES[1]], f"livekit openai.TTS {model}", clips=2
    )


async def test_boson_plugin_synthesize_and_stream(stack: Stack, seconds_of: dict[str, float]) -> None:
    pytest.importorskip("livekit.plugins.boson", reason="livekit-plugins-boson comes with the clients extra")
    import aiohttp
    from livekit.plugins import boson

    async with aiohttp.ClientSession() as session:
        # Its defaults: model "higgs-audio-v3-tts", voice "default", pcm, stream: false/true.
        plugin = boson.TTS(api_key=UNUSED_KEY, base_url=stack.url, http_session=session)
        frame = await plugin.synthesize(TEXT).collect()
        assert frame.sample_rate == 24_000
        assert_seconds(frame.samples_per_channel / 24_000, seconds_of[TEXT], "boson synthesize()")

        # One segment per stream, as AgentSession drives it: the plugin posts the text up
        # to the flush as one request with stream: true and plays the raw PCM it gets.
        samples = 0
        async with plugin.stream() as stream:
            for sentence in SENTENCES:
                stream.push_text(sentence + " ")
            stream.flush()
            stream.end_input()
            async for event in stream:
                assert event.frame.sample_rate == 24_000
                samples += event.frame.samples_per_channel
        assert_seconds(samples / 24_000, seconds_of[REPLY], "boson stream()")
        await plugin.aclose()


# ---- openai-agents ------------------------------------------------------------------


async def test_openai_agents_tts_model(stack: Stack, seconds_of: dict[str, float]) -> None:
    pytest.importorskip("agents.voice", reason="openai-agents comes with the clients extra")
    import openai
    from agents.voice import OpenAITTSModel, TTSModelSettings

    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=UNUSED_KEY, max_retries=0, timeout=30)
    model = OpenAITTSModel(model="gpt-4o-mini-tts", openai_client=client)
    # It always sends its own instructions, and reads raw PCM.
    pcm = b"".join([chunk async for chunk in model.run(TEXT, TTSModelSettings(voice="echo"))])
    assert_seconds(pcm_seconds(pcm), seconds_of[TEXT], "openai-agents OpenAITTSModel")
    await client.close()

