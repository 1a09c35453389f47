"""The emulator's speech: the request's text spoken by eSpeak NG, fitted to the modelled length.

The timing model decides how many 40 ms frames a text yields; the audio has to fill exactly
that many, so chunk sizes, stream lengths and every timing stay as calibrated. The text is
cut into phrases, each given its share of the clip by character count; each phrase is
rendered by eSpeak at a speaking rate near the calibrated one and resampled from eSpeak's
22.05 kHz onto exactly its share of 24 kHz samples. Rendering runs on one background thread
(the C library is one global synthesiser), every request's first phrase before anyone's
second; the event loop never waits on eSpeak, only a request's own chunks wait for their
phrases.

When eSpeak cannot load, every clip is the synthetic "voiced words" signal of
``gateway.emulator.audio`` instead, and ``SpeechAudio.description`` says why.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gateway.emulator.audio import SampledClip, SpeechSynth, hashed_noise, noise_key, voice_pitch_hz
from gateway.emulator.espeak import (
    MAX_RATE_WPM,
    MIN_RATE_WPM,
    Espeak,
    EspeakUnavailable,
    EspeakVoice,
    LibraryLocator,
    import_locator,
)
from gateway.types.codec import SAMPLE_RATE

log = logging.getLogger("gateway.emulator")

# English variants whose output is a pure function of (text, voice, rate, pitch): no
# flutter, roughness or breath noise, which eSpeak draws from state that carries across
# renders. Reproducible audio is what lets a test compare a stream with a direct rendering.
STABLE_VARIANTS = (
    "michel", "shelby", "Denis", "adam", "Hugo", "benjamin",
    "david", "edward2", "miguel", "mike2", "Storm", "Henrique", "Diogo",
)  # fmt: skip
DEFAULT_VOICE = EspeakVoice("en-us+michel", pitch=50, pitch_range=50)
# eSpeak at this rate lands within ~10% of the calibrated Higgs speaking rate on typical
# text, so a rendering is only resampled. Further off (speed != 1, odd text), it is rendered
# again at a rate that matches, so it keeps its pitch instead of being sped up by resampling.
RENDER_RATE_WPM = 150
_RESAMPLE_ONLY = (0.8, 1.25)
# Texts are rendered phrase by phrase, first phrases first across all requests, so a burst
# of 64 arrivals gets its first chunks quickly instead of queueing behind whole texts.
_PHRASE = re.compile(r"[^.!?;:,\n]*(?:[.!?;:,\n]+|$)")
_PHRASE_CHARS = 80
_ROOM_TONE = 0.004  # never digital silence, and the part of the signal that follows `seed`
# Tests and benchmarks repeat texts and phrases: eSpeak renders each (phrase, voice, rate)
# once, fitting it to a share is cheap. Bounded by audio length, oldest out first.
_RENDERED_CACHE_SAMPLES = 22050 * 600  # ten minutes of eSpeak output (int16: ~26 MB)
_FITTED_CACHE_SAMPLES = SAMPLE_RATE * 300  # five minutes of fitted phrases (float32: ~29 MB)


class Renderer(Protocol):
    """What renders a phrase: ``Espeak`` itself, or a cache in front of it."""

    sample_rate: int

    def render(self, text: str, voice: EspeakVoice, rate_wpm: int) -> np.ndarray: ...


class SampleCache:
    """A least-recently-used cache of sample arrays, bounded by their total length."""

    def __init__(self, max_samples: int) -> None:
        self.max_samples = max_samples
        self._entries: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
        self._samples = 0

    def get(self, key: tuple[object, ...]) -> np.ndarray | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: tuple[object, ...], samples: np.ndarray) -> None:
        samples.setflags(write=False)
        if key in self._entries:
            return
        self._entries[key] = samples
        self._samples += len(samples)
        while self._samples > self.max_samples and len(self._entries) > 1:
            self._samples -= len(self._entries.popitem(last=False)[1])


class CachingRenderer:
    """eSpeak with each (text, voice, rate) rendered once: its output is a pure function of them."""

    def __init__(self, espeak: Espeak, max_samples: int = _RENDERED_CACHE_SAMPLES) -> None:
        self._espeak = espeak
        self.sample_rate = espeak.sample_rate
        self._cache = SampleCache(max_samples)

    def render(self, text: str, voice: EspeakVoice, rate_wpm: int) -> np.ndarray:
        key = (text, voice, rate_wpm)
        found = self._cache.get(key)
        if found is None:
            found = self._espeak.render(text, voice, rate_wpm)
            self._cache.put(key, found)
        return found


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


def render_fitted(espeak: Renderer, text: str, total_samples: int, voice: EspeakVoice) -> np.ndarray:
    """The text spoken by ``voice``, fitted to ``total_samples`` at 24 kHz (blocking)."""
    fitted = fit_to_length(render_native(espeak, text, total_samples, voice), total_samples)
    return fitted.astype(np.float32)  # what clips hold, so a direct rendering matches them exactly


def phrases(text: str, total_samples: int) -> list[tuple[str, int, int]]:
    """``text`` cut into phrases of at most ~80 characters, each with its ``[start, stop)``
    share of the clip (by character count, like the timing model), covering it exactly."""
    pieces: list[str] = []
    for match in _PHRASE.finditer(text):
        piece = match.group(0)
        while len(piece) > _PHRASE_CHARS:  # a long run without punctuation: cut at a space
            cut = piece.rfind(" ", 0, _PHRASE_CHARS)
            cut = cut if cut > 0 else _PHRASE_CHARS
            pieces.append(piece[:cut])
            piece = piece[cut:]
        pieces.append(piece)
    pieces = [piece for piece in pieces if piece.strip()] or [text]
    weights = np.cumsum([len(piece.strip()) or 1 for piece in pieces])
    bounds = np.concatenate([[0], np.round(weights / weights[-1] * total_samples).astype(np.int64)])
    return [(piece.strip(), int(bounds[i]), int(bounds[i + 1])) for i, piece in enumerate(pieces)]


def render_clip(espeak: Renderer, text: str, total_samples: int, voice: EspeakVoice) -> np.ndarray:
    """The whole clip as a request's stream carries it (before room tone), rendered directly."""
    parts = [render_fitted(espeak, phrase, stop - start, voice) for phrase, start, stop in phrases(text, total_samples)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def render_native(espeak: Renderer, text: str, total_samples: int, voice: EspeakVoice) -> np.ndarray:
    """eSpeak's rendering at a speaking rate near the modelled length (before fitting)."""
    target_seconds = max(total_samples, 1) / SAMPLE_RATE
    native = espeak.render(text, voice, RENDER_RATE_WPM)
    ratio = (len(native) / espeak.sample_rate) / target_seconds
    if _RESAMPLE_ONLY[0] <= ratio <= _RESAMPLE_ONLY[1]:
        return native
    rate = int(round(min(MAX_RATE_WPM, max(MIN_RATE_WPM, RENDER_RATE_WPM * ratio))))
    return espeak.render(text, voice, rate)


class Clip(Protocol):
    """One request's audio: ``total_samples`` samples, readable by range once ``ready``."""

    total_samples: int

    async def ready(self, until: int | None = None) -> None: ...

    def cancel(self) -> None: ...

    def pcm(self, start: int, stop: int) -> bytes: ...

    def frames_pcm(self, first_frame: int, frames: int) -> bytes: ...


@dataclass(order=True)
class _Job:
    priority: tuple[int, int]  # (phrase index, arrival): every request's first phrase goes first
    text: str = field(compare=False)
    samples: int = field(compare=False)
    voice: EspeakVoice = field(compare=False)
    result: Future[np.ndarray] = field(compare=False, default_factory=Future)


class SpokenClip(SampledClip):
    """A clip made of phrases rendered in the background, plus seeded room tone."""

    def __init__(self, parts: list[tuple[int, int, Future[np.ndarray]]], total_samples: int, text: str, seed: int) -> None:
        self.total_samples = total_samples
        self._parts = parts  # (start, stop, rendering) in order, covering [0, total_samples)
        self._rendered: list[np.ndarray | None] = [None] * len(parts)
        self._noise_key = noise_key(text, seed)

    async def ready(self, until: int | None = None) -> None:
        """Wait until samples ``[0, until)`` (default: all) are rendered."""
        until = self.total_samples if until is None else until
        for index, (start, _, rendering) in enumerate(self._parts):
            if start >= until and index > 0:
                break
            if self._rendered[index] is None:
                self._rendered[index] = await asyncio.wrap_future(rendering)

    def cancel(self) -> None:
        """The request is over: phrases not rendered yet never will be."""
        for _, _, rendering in self._parts:
            rendering.cancel()

    def samples(self, start: int, stop: int) -> np.ndarray:
        start, stop = max(0, start), min(self.total_samples, stop)
        out = hashed_noise(start, stop, self._noise_key) * _ROOM_TONE
        for index, (part_start, part_stop, _) in enumerate(self._parts):
            lo, hi = max(start, part_start), min(stop, part_stop)
            if hi <= lo:
                continue
            rendered = self._rendered[index]
            if rendered is None:
                raise RuntimeError("clip read before it was rendered; await ready() first")
            out[lo - start : hi - start] += rendered[lo - part_start : hi - part_start]
        return out


class SyntheticClip(SpeechSynth):
    """The fallback: closed-form voiced words, computed range by range; always ready."""

    async def ready(self, until: int | None = None) -> None:
        return None

    def cancel(self) -> None:
        return None


class SpeechAudio:
    """Hands every request its clip: eSpeak when it loaded, the synthetic signal otherwise."""

    def __init__(self, locator_factory: Callable[[], LibraryLocator] = import_locator, *, speak: bool = True) -> None:
        self._espeak: Espeak | None = None
        self._jobs: queue.PriorityQueue[_Job] = queue.PriorityQueue()
        self._stop = _Job((-1, -1), "", 0, DEFAULT_VOICE)  # sorts before every real job
        self._arrivals = itertools.count()
        self._renderer: CachingRenderer | None = None
        self._fitted_cache = SampleCache(_FITTED_CACHE_SAMPLES)
        self._thread: threading.Thread | None = None
        if not speak:
            self.description = "synthetic (eSpeak NG turned off)"
            return
        try:
            self._espeak = Espeak(locator_factory)
            self._espeak.render("ready", DEFAULT_VOICE)  # the first render sets up state; keep it out of requests
        except EspeakUnavailable as exc:
            self.description = f"synthetic (eSpeak NG unavailable: {exc})"
            log.warning("speech audio: eSpeak NG could not be loaded (%s); speaking with the synthetic signal", exc)
        else:
            self.description = f"espeak-ng ({self._espeak.sample_rate} Hz, resampled to {SAMPLE_RATE} Hz)"
            self._renderer = CachingRenderer(self._espeak)
            self._thread = threading.Thread(target=self._render_jobs, name="espeak", daemon=True)
            self._thread.start()

    @property
    def speaks(self) -> bool:
        return self._espeak is not None

    def clip(self, text: str, total_samples: int, seed: int, clone_key: str | None) -> Clip:
        if self._espeak is None:
            return SyntheticClip(text, total_samples, seed, voice_pitch_hz(clone_key))
        voice = espeak_voice(clone_key)
        arrival = next(self._arrivals)
        parts: list[tuple[int, int, Future[np.ndarray]]] = []
        for index, (phrase, start, stop) in enumerate(phrases(text, total_samples)):
            job = _Job((index, arrival), phrase, stop - start, voice)
            self._jobs.put(job)
            parts.append((start, stop, job.result))
        return SpokenClip(parts, total_samples, text, seed)

    def close(self) -> None:
        if self._thread is not None:
            self._jobs.put(self._stop)
            self._thread = None

    def _render_jobs(self) -> None:
        while True:
            job = self._jobs.get()
            if job is self._stop:
                return
            if not job.result.set_running_or_notify_cancel():
                continue
            try:
                job.result.set_result(self._fitted(job.text, job.samples, job.voice))
            except Exception as exc:  # noqa: BLE001  (handed to the request that waits for it)
                job.result.set_exception(exc)

    def _fitted(self, text: str, samples: int, voice: EspeakVoice) -> np.ndarray:
        """One phrase fitted to its share; only the render thread calls this (and owns the caches)."""
        key = (text, voice, samples)
        fitted = self._fitted_cache.get(key)
        if fitted is None:
            assert self._renderer is not None
            fitted = render_fitted(self._renderer, text, samples, voice)
            self._fitted_cache.put(key, fitted)
        return fitted
