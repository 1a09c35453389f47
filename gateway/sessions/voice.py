"""A session config turned into what every one of its sentences sends a worker.

"One voice": whichever pool serves a sentence, it carries the session's voice, reference
audio and seed. A session that names no seed gets one drawn when its config is accepted,
so two workers never pick different random voices for two sentences of one reply.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from gateway.config import ModelsConfig, VoicesConfig
from gateway.errors import GatewayError
from gateway.security.ref_audio import RefAudioPolicy
from gateway.speech_stream_protocol import StreamingSpeechSessionConfig, model_not_found
from gateway.voices.resolve import resolve_voice
from gateway.voices.store import VoiceStore

# Config fields a worker's speech request takes as they are (the gateway encodes, so it
# always asks for streamed PCM and applies speed itself).
_FORWARDED = ("ref_audio", "ref_text", "seed", "max_new_tokens", "language", "instructions", "task_type")
SEED_BITS = 31


class ConfigRefused(Exception):
    """A session.config the gateway cannot serve, with the text the client gets."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SessionVoices:
    """Checks a config against what only the gateway knows (model aliases, ``ref_audio``
    policy) and builds each sentence's worker payload."""

    def __init__(
        self,
        models: ModelsConfig,
        voices: VoicesConfig,
        store: VoiceStore,
        ref_audio: RefAudioPolicy,
        new_seed: Callable[[], int] = lambda: secrets.randbits(SEED_BITS),
    ) -> None:
        self._served_model = models.served_model_name
        self._aliases = {models.served_model_name, *models.aliases}
        self._voices = voices
        self._store = store
        self._ref_audio = ref_audio
        self._new_seed = new_seed

    def accept(self, config: StreamingSpeechSessionConfig) -> StreamingSpeechSessionConfig:
        """The config the session keeps (its seed fixed), or ``ConfigRefused``."""
        if config.model and config.model not in self._aliases:
            raise ConfigRefused(model_not_found(config.model))
        if config.ref_audio is not None:
            try:
                self._ref_audio.check(config.ref_audio)  # never let a client make a worker fetch any URL
            except GatewayError as exc:
                raise ConfigRefused(f"Invalid session config: {exc.message}") from None
        if config.seed is None:
            config = config.model_copy(update={"seed": self._new_seed()})
        return config

    def payload(self, config: StreamingSpeechSessionConfig, text: str) -> dict[str, Any]:
        """One sentence's worker request; raises ``GatewayError`` for a voice that names none."""
        payload: dict[str, Any] = {"model": self._served_model, "input": text, "response_format": "pcm", "stream_format": "audio"}
        # With reference audio the worker clones it and ignores the voice, as it does itself.
        voice = resolve_voice(config.voice, self._voices, self._store) if config.ref_audio is None else None
        if voice is not None:
            payload["voice"] = voice
        for field in _FORWARDED:
            value = getattr(config, field)
            if value is not None:
                payload[field] = value
        return payload
