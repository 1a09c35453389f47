"""The emulator's speech: the request's text spoken by eSpeak NG, fitted to the modelled length.

The timing model decides how many 40 ms frames a text yields; the audio has to fill exactly
that many, so chunk sizes, stream lengths and every timing stay as calibrated. eSpeak renders
the text once per request on a single background thread (the C library is one global
synthesiser), at a speaking rate chosen so its natural length lands near the modelled one; the
rendering is then resampled from eSpeak's 22.05 kHz onto exactly the modelled number of 24 kHz
samples. The event loop never waits on eSpeak: a request's first chunk awaits its own clip.

When eSpeak cannot load, every clip is the synthetic "voiced words" signal of
``gateway.emulator.audio`` instead, and ``SpeechAudio.description`` says why.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from threading import Lock
from typing import Protocol

import numpy as np

from gateway.emulator.audio import SAMPLES_PER_FRAME, SpeechSynth, hashed_noise, to_pcm16, voice_pitch_hz
from gateway.emulator.espeak import (
    DEFAULT_RATE_WPM,
    MAX_RATE_WPM,
    MIN_RATE_WPM,
    Espeak,
    EspeakUnavailable,
    EspeakVoice,
    LibraryLocator,
    import_locator,
)
from gateway.types import SAMPLE_RATE

log = logging.getLogger("gateway.emulator")

# English variants whose output is a pure function of (text, voice, rate, pitch): no
# flutter, roughness or breath noise, which eSpeak draws from state that carries across
# renders. Reproducible audio is what lets a test compare a stream with a direct rendering.
STABLE_VARIANTS = (
    "michel", "shelby", "Denis", "adam", "Hugo", "benjamin",
    "david", "edward2", "miguel", "mike2", "Storm", "Henrique", "Diogo",
)  # fmt: skip
DEFAULT_VOICE = EspeakVoice("en-us+michel", pitch=50, pitch_range=50)
# Rendered at the default rate, eSpeak within this ratio of the modelled length is only
# resampled; further off, it is rendered again at a rate that matches (so a long text keeps
# its pitch instead of being sped up by resampling).
_RESAMPLE_ONLY = (0.85, 1.18)
_ROOM_TONE = 0.004  # never digital silence, and the part of the signal that follows `seed`
_CACHE_SAMPLES = SAMPLE_RATE * 600  # ten minutes of fitted audio (float32: ~58 MB)


def espeak_voice(clone_key: str | None) -> EspeakVoice:
    """The eSpeak voice for a request: the default, or a stable variant and pitch per cloned voice."""
    if not clone_key:
        return DEFAULT_VOICE
    digest = zlib.crc32(clone_key.lower().encode())
    variant = STABLE_VARIANTS[digest % len(STABLE_VARIANTS)]
    pitch = 25 + (digest >> 8) % 51  # 25..75
    return EspeakVoice(f"en-us+{variant}", pitch=pitch, pitch_range=40 + (digest >> 16) % 31)


def fit_to_length(native: np.ndarray, total_samples: int) -> np.ndarray:
    """``native`` samples (int16) resampled to exactly ``total_samples`` floats in [-1, 1]."""
    if total_samples <= 0:
        return np.zeros(0, dtype=np.float64)
    if len(native) == 0:
        return np.zeros(total_samples, dtype=np.float64)
    source = native.astype(np.float64) / 32768.0
    # Sample centres of the output mapped onto the rendering's time axis.
    positions = (np.arange(total_samples) + 0.5) * (len(source) / total_samples) - 0.5
    return np.interp(positions, np.arange(len(source)), source)


def render_fitted(espeak: Espeak, text: str, total_samples: int, voice: EspeakVoice) -> np.ndarray:
    """The text spoken by ``voice``, fitted to ``total_samples`` at 24 kHz (blocking)."""
    fitted = fit_to_length(render_native(espeak, text, total_samples, voice), total_samples)
    return fitted.astype(np.float32)  # what clips hold, so a direct rendering matches them exactly


def render_native(espeak: Espeak, text: str, total_samples: int, voice: EspeakVoice) -> np.ndarray:
    """eSpeak's rendering at a speaking rate near the modelled length (before fitting)."""
    target_seconds = max(total_samples, 1) / SAMPLE_RATE
    native = espeak.render(text, voice, DEFAULT_RATE_WPM)
    ratio = (len(native) / espeak.sample_rate) / target_seconds
    if _RESAMPLE_ONLY[0] <= ratio <= _RESAMPLE_ONLY[1]:
        return native
    rate = int(round(min(MAX_RATE_WPM, max(MIN_RATE_WPM, DEFAULT_RATE_WPM * ratio))))
    return espeak.render(text, voice, rate)


class Clip(Protocol):
    """One request's audio: ``total_samples`` samples, readable by range once ``ready``."""

    total_samples: int

    async def ready(self) -> None: ...

    def pcm(self, start: int, stop: int) -> bytes: ...

    def frames_pcm(self, first_frame: int, frames: int) -> bytes: ...


class SpokenClip:
    """A clip whose samples come from a background eSpeak rendering plus seeded room tone."""

    def __init__(self, rendering: Future[np.ndarray], total_samples: int, text: str, seed: int) -> None:
        self.total_samples = total_samples
        self._rendering = rendering
        self._samples: np.ndarray | None = None
        self._noise_key = (zlib.crc32(text.encode()) ^ (seed * 2654435761)) & 0xFFFFFFFF

    async def ready(self) -> None:
        if self._samples is None:
            self._samples = await asyncio.wrap_future(self._rendering)

    def samples(self, start: int, stop: int) -> np.ndarray:
        if self._samples is None:
            raise RuntimeError("clip read before it was rendered; await ready() first")
        start, stop = max(0, start), min(self.total_samples, stop)
        if stop <= start:
            return np.zeros(0, dtype=np.float64)
        return self._samples[start:stop].astype(np.float64) + hashed_noise(start, stop, self._noise_key) * _ROOM_TONE

    def pcm(self, start: int, stop: int) -> bytes:
        return to_pcm16(self.samples(start, stop))

    def frames_pcm(self, first_frame: int, frames: int) -> bytes:
        start = first_frame * SAMPLES_PER_FRAME
        return self.pcm(start, start + frames * SAMPLES_PER_FRAME)


class SyntheticClip(SpeechSynth):
    """The fallback: closed-form voiced words, computed range by range; always ready."""

    async def ready(self) -> None:
        return None


class SpeechAudio:
    """Hands every request its clip: eSpeak when it loaded, the synthetic signal otherwise."""

    def __init__(self, locator_factory: Callable[[], LibraryLocator] = import_locator) -> None:
        self._espeak: Espeak | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._cache: OrderedDict[tuple[str, EspeakVoice, int], np.ndarray] = OrderedDict()
        self._cached_samples = 0
        self._cache_lock = Lock()
        try:
            self._espeak = Espeak(locator_factory)
            self._espeak.render("ready", DEFAULT_VOICE)  # the first render sets up state; keep it out of requests
        except EspeakUnavailable as exc:
            self.description = f"synthetic (eSpeak NG unavailable: {exc})"
            log.warning("speech audio: eSpeak NG could not be loaded (%s); speaking with the synthetic signal", exc)
        else:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="espeak")
            self.description = f"espeak-ng ({self._espeak.sample_rate} Hz, resampled to {SAMPLE_RATE} Hz)"

    @property
    def speaks(self) -> bool:
        return self._espeak is not None

    def clip(self, text: str, total_samples: int, seed: int, clone_key: str | None) -> Clip:
        if self._espeak is None or self._executor is None:
            return SyntheticClip(text, total_samples, seed, voice_pitch_hz(clone_key))
        rendering = self._executor.submit(self._fitted, text, total_samples, espeak_voice(clone_key))
        return SpokenClip(rendering, total_samples, text, seed)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _fitted(self, text: str, total_samples: int, voice: EspeakVoice) -> np.ndarray:
        key = (text, voice, total_samples)
        with self._cache_lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        assert self._espeak is not None
        fitted = render_fitted(self._espeak, text, total_samples, voice)
        fitted.setflags(write=False)
        with self._cache_lock:
            if key not in self._cache:
                self._cache[key] = fitted
                self._cached_samples += len(fitted)
            while self._cached_samples > _CACHE_SAMPLES and len(self._cache) > 1:
                self._cached_samples -= len(self._cache.popitem(last=False)[1])
        return fitted
