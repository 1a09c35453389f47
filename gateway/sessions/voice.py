"""A session config turned into what every one of its sentences sends a worker.

"One voice": whichever pool serves a sentence, it carries the session's voice, reference
audio and seed. A session that names no seed gets one drawn when its config is accepted,
so two workers never pick different random voices for two sentences of one reply.
The checks and the payload are the HTTP path's (``gateway.worker_payload``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from gateway.errors import GatewayError
from gateway.worker.session_protocol import StreamingSpeechSessionConfig, model_not_found
from gateway.types.text_limits import MAX_INPUT_CHARS, MAX_LANGUAGE_CHARS, MAX_NAME_CHARS, MAX_REF_AUDIO_CHARS
from gateway.voices.owners import NOBODY
from gateway.worker_payload import SpeechFields, WorkerPayloads

SEED_BITS = 31
# The HTTP request's caps on the same fields (``api/speech_request.py``): the worker has none.
FIELD_CAPS = {
    "model": MAX_NAME_CHARS, "voice": MAX_NAME_CHARS, "language": MAX_LANGUAGE_CHARS,
    "instructions": MAX_INPUT_CHARS, "ref_text": MAX_INPUT_CHARS, "ref_audio": MAX_REF_AUDIO_CHARS,
}  # fmt: skip


class ConfigRefused(Exception):
    """A session.config the gateway cannot serve, with the text the client gets."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SessionVoices:
    """Checks a config against what only the gateway knows (model aliases, the
    ``max_new_tokens`` budget, ``ref_audio`` policy) and builds each sentence's worker payload."""

    def __init__(
        self,
        payloads: WorkerPayloads,
        new_seed: Callable[[], int] = lambda: secrets.randbits(SEED_BITS),
        owner: str = NOBODY,  # no registered voice until bound to a caller (for_owner)
    ) -> None:
        self._payloads = payloads
        self._new_seed = new_seed
        self._owner = owner  # whose voices the session's ``voice`` names

    def for_owner(self, owner: str) -> SessionVoices:
        """The same checks for one session, resolving voices among ``owner``'s."""
        return SessionVoices(self._payloads, self._new_seed, owner)

    async def accept(
        self, config: StreamingSpeechSessionConfig, previous: StreamingSpeechSessionConfig | None = None
    ) -> StreamingSpeechSessionConfig:
        """The config the session keeps (its seed fixed, its ``ref_audio`` as a worker gets
        it), or ``ConfigRefused``. A ``ref_audio`` equal to the ``previous`` config's was
        judged when that one was accepted: a client resending its config (a multi-MB data
        URI) costs a comparison, not a decode."""
        for name, cap in FIELD_CAPS.items():
            value = getattr(config, name)
            if value is not None and len(value) > cap:
                raise ConfigRefused(f"Invalid session config: {name} must be at most {cap} characters")
        if config.model and not self._payloads.serves(config.model):
            raise ConfigRefused(model_not_found(config.model))  # the worker's own text
        try:
            fields = await self._payloads.check(_fields(config), previous.ref_audio if previous else None)
        except GatewayError as exc:  # the HTTP path's 400 text, as the worker words a bad config
            raise ConfigRefused(f"Invalid session config: {exc.message}") from None
        update: dict[str, object] = {}
        if fields.ref_audio != config.ref_audio:
            update["ref_audio"] = fields.ref_audio
        if config.seed is None:
            update["seed"] = self._new_seed()
        return config.model_copy(update=update) if update else config

    def payload(self, config: StreamingSpeechSessionConfig, text: str) -> dict[str, Any]:
        """One sentence's worker request; raises ``GatewayError`` for a voice that names none."""
        return self._payloads.build(_fields(config), text, owner=self._owner)


def _fields(config: StreamingSpeechSessionConfig) -> SpeechFields:
    return SpeechFields(
        model=config.model or None,
        # With reference audio the worker clones it and ignores the voice, as it does itself.
        voice=config.voice if config.ref_audio is None else None,
        ref_audio=config.ref_audio,
        ref_text=config.ref_text,
        seed=config.seed,
        max_new_tokens=config.max_new_tokens,
        language=config.language,
        instructions=config.instructions,
        task_type=config.task_type,
    )
