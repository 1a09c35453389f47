"""Faults on demand: what a sick worker does, switched on by flags or ``POST /emulator/faults``.

``POST /emulator/faults`` takes a JSON object; every field is optional and only the
fields present change (``null`` switches a fault off). ``{"clear": true}`` resets all
faults first, then applies any other fields in the same body.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class FaultUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    clear: bool = False
    # The next N speech requests fail with 500 in the worker's error shape.
    fail_next: int | None = Field(None, ge=0)
    # Streamed responses drop the connection after K audio chunks (0: before any audio);
    # whole-file responses drop it before answering.
    cut_after_chunks: int | None = Field(None, ge=0)
    # Generation fails after K audio chunks: SSE sends speech.audio.error, a raw stream is
    # cut, a whole-file request answers 500.
    error_after_chunks: int | None = Field(None, ge=0)
    # Speech requests send nothing (not even headers) for S wall seconds, then proceed.
    hang_seconds: float | None = Field(None, ge=0)
    # GET /health answers 503 {"status": "unhealthy"}.
    unhealthy: bool | None = None
    # The engine dies now, as the released worker's does (gateway.emulator.engine_death):
    # in-flight requests fail, the next one answers 500, then the server stops listening
    # and the process exits. There is no coming back: only a restart revives it.
    engine_dead: bool | None = None
    # /load keeps counting a request in the two windows where the released worker's
    # load_aware_call never decrements (gateway.emulator.speech.LoadCounter): the client
    # left before the handler returned, or a raw stream failed after its 200.
    leak_load: bool | None = None
    # The audio goes bad the way broken CUDA-graph paths do, from a concurrency up: while N
    # or more requests run on the engine, each chunk's audio is drowned in noise, silent,
    # or clipped at full scale. The stream itself stays well formed (200, every chunk).
    noisy_from: int | None = Field(None, ge=1)
    silent_from: int | None = Field(None, ge=1)
    clipped_from: int | None = Field(None, ge=1)


# The degraded audio's shape: noise well above the speech in the speech band (each noise
# sample held for 4 samples: its power below 3 kHz, where the harmonics are), HNR far below
# 0 dB; and a gain that drives most voiced samples past full scale.
NOISE_RMS = 0.25 * 32767
NOISE_HOLD = 4
CLIP_GAIN = 12.0


@dataclass
class Faults:
    fail_next: int = 0
    cut_after_chunks: int | None = None
    error_after_chunks: int | None = None
    hang_seconds: float | None = None
    unhealthy: bool = False
    engine_dead: bool = False
    leak_load: bool = False
    noisy_from: int | None = None
    silent_from: int | None = None
    clipped_from: int | None = None

    def apply(self, update: FaultUpdate) -> None:
        if update.clear:
            self.fail_next, self.cut_after_chunks, self.error_after_chunks = 0, None, None
            self.hang_seconds, self.unhealthy, self.leak_load = None, False, False
            self.noisy_from = self.silent_from = self.clipped_from = None
            # A dead engine stays dead: clearing faults does not revive it.
        fields = update.model_fields_set
        if "fail_next" in fields:
            self.fail_next = update.fail_next or 0
        if "cut_after_chunks" in fields:
            self.cut_after_chunks = update.cut_after_chunks
        if "error_after_chunks" in fields:
            self.error_after_chunks = update.error_after_chunks
        if "hang_seconds" in fields:
            self.hang_seconds = update.hang_seconds or None
        if "unhealthy" in fields:
            self.unhealthy = bool(update.unhealthy)
        if update.engine_dead:
            self.engine_dead = True
        if "leak_load" in fields:
            self.leak_load = bool(update.leak_load)
        if "noisy_from" in fields:
            self.noisy_from = update.noisy_from
        if "silent_from" in fields:
            self.silent_from = update.silent_from
        if "clipped_from" in fields:
            self.clipped_from = update.clipped_from

    def take_failure(self) -> bool:
        """True if this request must fail (and count it off)."""
        if self.fail_next > 0:
            self.fail_next -= 1
            return True
        return False

    def as_dict(self) -> dict[str, object]:
        return {
            "fail_next": self.fail_next,
            "cut_after_chunks": self.cut_after_chunks,
            "error_after_chunks": self.error_after_chunks,
            "hang_seconds": self.hang_seconds,
            "unhealthy": self.unhealthy,
            "engine_dead": self.engine_dead,
            "leak_load": self.leak_load,
            "noisy_from": self.noisy_from,
            "silent_from": self.silent_from,
            "clipped_from": self.clipped_from,
        }

    @property
    def degrades_audio(self) -> bool:
        return self.noisy_from is not None or self.silent_from is not None or self.clipped_from is not None

    def degrade(self, pcm: bytes, running: int, salt: int) -> bytes:
        """``pcm`` as the engine makes it while ``running`` requests run (the audio faults).

        ``salt`` varies the noise per chunk (deterministically) so no two chunks repeat it."""
        if not pcm or not self.degrades_audio:
            return pcm
        if self.silent_from is not None and running >= self.silent_from:
            return bytes(len(pcm))
        noisy = self.noisy_from is not None and running >= self.noisy_from
        clipped = self.clipped_from is not None and running >= self.clipped_from
        if not (noisy or clipped):
            return pcm
        samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2").astype(np.float32)
        if noisy:
            rng = np.random.default_rng(zlib.crc32(pcm[:64]) ^ salt)
            held = rng.normal(0.0, NOISE_RMS, -(-samples.size // NOISE_HOLD)).astype(np.float32)
            samples = samples + np.repeat(held, NOISE_HOLD)[: samples.size]
        if clipped:
            samples = samples * CLIP_GAIN
        return np.clip(samples, -32768, 32767).astype("<i2").tobytes()


class StreamCut(Exception):
    """Raised inside a response to drop the connection, as a crashing worker would."""


class GenerationFailed(Exception):
    """The engine failed mid-request (the error_after_chunks fault)."""
