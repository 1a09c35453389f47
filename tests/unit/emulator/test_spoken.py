"""The emulated worker speaks the text with eSpeak NG, fitted to the timing model's length."""

from __future__ import annotations

import asyncio
import logging
import sys
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from gateway.worker.profile import DeployProfile
from gateway.emulator.app import EmulatorSettings, create_app
from gateway.emulator.audio import BYTES_PER_FRAME, SAMPLES_PER_FRAME, SpeechSynth, voice_pitch_hz
from gateway.emulator.espeak import Espeak
from gateway.emulator.spoken import (
    DEFAULT_VOICE,
    CachingRenderer,
    SpeechAudio,
    SpokenClip,
    espeak_voice,
    fit_to_length,
    phrases,
    render_clip,
    render_fitted,
)
from gateway.worker.timing import StepModel, TimingParams

TEXT = "The gateway routes every request to the pool that serves it best. Latency first!"
SEED = 42


class MissingLibrary:
    def get_library_path(self) -> str:
        return "/nonexistent/libespeak-ng.so"

    def get_data_path(self) -> str:
        raise RuntimeError("data path not exists")


def missing_library() -> MissingLibrary:
    return MissingLibrary()


def stream_pcm(client: TestClient, **body: object) -> bytes:
    response = client.post(
        "/v1/audio/speech", json={"input": TEXT, "stream_format": "audio", "response_format": "pcm", **body}
    )
    assert response.status_code == 200, response.text
    return response.content


def expected_pcm(total_samples: int, clone_key: str | None = None) -> bytes:
    """A direct eSpeak rendering, fitted the same way, with the same seeded room tone."""
    rendering: Future[np.ndarray] = Future()
    rendering.set_result(render_clip(Espeak(), TEXT, total_samples, espeak_voice(clone_key)))
    clip = SpokenClip([(0, total_samples, rendering)], total_samples, TEXT, SEED)
    asyncio.run(clip.ready())
    return clip.pcm(0, total_samples)


def modelled_frames(profile: DeployProfile) -> int:
    return StepModel(profile, TimingParams()).frames_for(TEXT)


def test_a_stream_is_the_espeak_rendering_of_the_text(low_latency: DeployProfile, tmp_path: Path) -> None:
    app = create_app(EmulatorSettings(model="m", profile=low_latency, voices_dir=tmp_path, time_scale=0.01))
    with TestClient(app) as client:
        pcm = stream_pcm(client)
        assert client.get("/health").json()["details"]["speech_audio"].startswith("espeak-ng")
    frames = modelled_frames(low_latency)
    assert len(pcm) == frames * BYTES_PER_FRAME  # the timing model's duration, to the sample
    assert pcm == expected_pcm(frames * SAMPLES_PER_FRAME)
    synthetic = SpeechSynth(TEXT, frames * SAMPLES_PER_FRAME, SEED, voice_pitch_hz(None)).pcm(0, frames * SAMPLES_PER_FRAME)
    assert pcm != synthetic


def test_a_whole_file_lasts_what_the_timing_model_says(low_latency: DeployProfile, tmp_path: Path) -> None:
    app = create_app(EmulatorSettings(model="m", profile=low_latency, voices_dir=tmp_path, time_scale=0.01))
    with TestClient(app) as client:
        response = client.post("/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"})
        slower = client.post("/v1/audio/speech", json={"input": TEXT, "response_format": "pcm", "speed": 0.5})
    frames = modelled_frames(low_latency)
    assert response.content == expected_pcm(frames * SAMPLES_PER_FRAME)
    assert len(slower.content) == 2 * len(response.content)  # speed as before: length / speed


def test_without_the_library_the_worker_falls_back_and_says_so_once(
    low_latency: DeployProfile, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = EmulatorSettings(
        model="m", profile=low_latency, voices_dir=tmp_path, time_scale=0.01, audio=lambda: SpeechAudio(missing_library)
    )
    with caplog.at_level(logging.WARNING, logger="gateway.emulator"):
        app = create_app(settings)
        with TestClient(app) as client:
            first, second = stream_pcm(client), stream_pcm(client)
            details = client.get("/health").json()["details"]["speech_audio"]
    assert details.startswith("synthetic (eSpeak NG unavailable")
    assert sum("eSpeak NG could not be loaded" in r.getMessage() for r in caplog.records) == 1
    frames = modelled_frames(low_latency)
    total = frames * SAMPLES_PER_FRAME
    assert first == second == SpeechSynth(TEXT, total, SEED, voice_pitch_hz(None)).pcm(0, total)


def test_without_the_emulator_extra_the_worker_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The speech library is the `emulator` extra, not a core dependency: an emulator started
    # without it says what to install (in /health and the log) and speaks the synthetic signal.
    monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # `import espeakng_loader` raises ImportError
    audio = SpeechAudio()
    try:
        assert not audio.speaks
        assert "pip install 'higgs-gateway[emulator]'" in audio.description
        assert "--synthetic-audio" in audio.description
    finally:
        audio.close()


def test_voices_map_to_distinct_stable_espeak_voices() -> None:
    assert espeak_voice(None) == DEFAULT_VOICE
    assert espeak_voice("Anna") == espeak_voice("anna")
    names = ["anna", "bert", "carla", "dieter", "emil", "fiona"]
    assert len({espeak_voice(name) for name in names}) == len(names)
    assert DEFAULT_VOICE not in {espeak_voice(name) for name in names}


def test_a_cloned_voice_sounds_different_and_the_same_every_time() -> None:
    total = 60 * SAMPLES_PER_FRAME
    espeak = Espeak()
    anna = render_fitted(espeak, TEXT, total, espeak_voice("anna"))
    assert np.array_equal(anna, render_fitted(espeak, TEXT, total, espeak_voice("anna")))
    assert not np.array_equal(anna, render_fitted(espeak, TEXT, total, DEFAULT_VOICE))
    assert np.abs(anna).max() > 0.1  # speech, not silence


@pytest.mark.parametrize("total", [0, 1, 1919, 1920, 123_457])
def test_fitting_yields_exactly_the_asked_length(total: int) -> None:
    native = (np.sin(np.arange(10_000) / 7.0) * 10_000).astype(np.int16)
    assert len(fit_to_length(native, total)) == total


def test_phrases_cover_the_clip_exactly_in_order() -> None:
    text = "One, two three. " + "word " * 40 + "end!"
    parts = phrases(text, 100_003)
    assert parts[0][1] == 0 and parts[-1][2] == 100_003
    assert all(a[2] == b[1] for a, b in zip(parts, parts[1:]))
    assert all(len(phrase) <= 80 for phrase, _, _ in parts)
    assert " ".join(phrase for phrase, _, _ in parts).split() == text.split()


def test_a_cancelled_clip_leaves_its_phrases_unrendered() -> None:
    parts: list[tuple[int, int, Future[np.ndarray]]] = [(0, 100, Future()), (100, 200, Future())]
    parts[0][2].set_running_or_notify_cancel()  # the render thread already has this one
    clip = SpokenClip(parts, 200, TEXT, SEED)
    clip.cancel()
    assert not parts[0][2].cancelled() and parts[1][2].cancelled()
    assert not parts[1][2].set_running_or_notify_cancel()  # what the render thread checks first


def test_cached_renders_equal_fresh_ones_and_the_cache_stays_bounded() -> None:
    espeak = Espeak()
    cached = CachingRenderer(espeak, max_samples=60_000)
    first = cached.render("A phrase said twice.", DEFAULT_VOICE, 150)
    assert cached.render("A phrase said twice.", DEFAULT_VOICE, 150) is first
    assert np.array_equal(first, espeak.render("A phrase said twice.", DEFAULT_VOICE, 150))
    for index in range(6):
        cached.render(f"Another phrase number {index}.", DEFAULT_VOICE, 150)
    assert cached._cache._samples <= 60_000 + len(first)  # noqa: SLF001
    assert cached._cache.get(("A phrase said twice.", DEFAULT_VOICE, 150)) is None  # noqa: SLF001  (oldest out first)
