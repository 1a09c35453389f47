"""What a worker's ``POST /v1/audio/speech`` gets, for an HTTP request and for each
sentence of a voice session alike.

Both paths run the same checks on what only the gateway can judge (the model name, the
``max_new_tokens`` budget against the workers' profiles, the ``ref_audio`` policy, the
voice, the prompt's bound against the workers' model length: ``gateway.worker.prompt_bound``) and
forward the same fields; each renders a refusal its own way (an HTTP error envelope, a
session ``error`` message).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from gateway.config import ModelsConfig, VoicesConfig
from gateway.errors import GatewayError, bad_request
from gateway.worker.prompt_bound import PromptBound, Reference, data_uri_seconds
from gateway.security.ref_audio import RefAudioPolicy
from gateway.types.codec import MIN_AUDIO_TOKENS
from gateway.voices.resolve import resolve_voice
from gateway.voices.store import VoiceStore

# Fields the worker takes as they are. The released worker accepts ``instructions`` and
# ``task_type`` and ignores them for Higgs; they pass on so the worker, not the gateway,
# decides what they mean. ``speed`` never does: the gateway encodes, so it always asks
# for streamed PCM and applies speed itself.
FORWARDED_FIELDS = ("ref_audio", "ref_text", "seed", "max_new_tokens", "language", "instructions", "task_type")
# The worker's tuning fields (sampling overrides; chunking and prompt modes a Higgs worker
# ignores), forwarded as the worker defines them.
FORWARDED_FIELDS += ("extra_params", "initial_codec_chunk_frames", "non_streaming_mode")


@dataclass(frozen=True, slots=True)
class SpeechFields:
    """A client's speech request as the worker payload needs it."""

    model: str | None
    voice: str | None  # as the client named it; None: the model's default voice
    ref_audio: str | None = None
    ref_text: str | None = None
    seed: int | None = None
    max_new_tokens: int | None = None
    language: str | None = None
    instructions: str | None = None
    task_type: str | None = None
    extra_params: dict[str, Any] | None = None
    initial_codec_chunk_frames: int | None = None
    non_streaming_mode: bool | None = None


def max_new_tokens_limit(model_lengths: Iterable[int | None]) -> int | None:
    """The largest ``max_new_tokens`` every pool can run: its Stage 0 ``max_model_len``
    (a request may land in either pool). None when no profile sets one."""
    known = [length for length in model_lengths if length is not None]
    return min(known) if known else None


def min_new_tokens_message() -> str:
    return (
        f"max_new_tokens must be at least {MIN_AUDIO_TOKENS}: the model spends its first "
        f"{MIN_AUDIO_TOKENS} tokens before the first audio frame, so a smaller budget gives no audio."
    )


class WorkerPayloads:
    """Checks what only the gateway can judge and builds what the worker gets."""

    def __init__(
        self,
        models: ModelsConfig,
        voices: VoicesConfig,
        store: VoiceStore,
        ref_audio: RefAudioPolicy,
        max_new_tokens: int | None = None,
    ) -> None:
        self._served_model = models.served_model_name
        self._aliases = {models.served_model_name, *models.aliases}
        # Names whose ``stream: true`` means raw audio (Boson's hosted API), not the worker's SSE.
        self.raw_stream_models = frozenset(models.raw_stream_models)
        self._voices = voices
        self._store = store
        self._ref_audio = ref_audio
        # The smallest Stage 0 max_model_len of the pools (a request may land in either);
        # None when no profile says.
        self._max_new_tokens = max_new_tokens
        self._prompt = PromptBound(max_new_tokens) if max_new_tokens is not None else None

    def serves(self, model: str) -> bool:
        return model in self._aliases

    async def check(self, fields: SpeechFields, accepted_ref_audio: str | None = None) -> SpeechFields:
        """The fields a worker may be given (``ref_audio`` in the form the policy passed),
        or the ``GatewayError`` an HTTP client gets (404 model, 400 otherwise).

        ``accepted_ref_audio``: a value this caller already had accepted (a session's previous
        config), not judged again."""
        if fields.model is not None and not self.serves(fields.model):
            raise GatewayError(
                404,
                f"The model '{fields.model}' does not exist; use {self._served_model} or one of its aliases.",
                param="model",
                code="model_not_found",
            )
        tokens, limit = fields.max_new_tokens, self._max_new_tokens
        if tokens is not None and tokens < MIN_AUDIO_TOKENS:
            raise bad_request(min_new_tokens_message(), "max_new_tokens")
        if tokens is not None and limit is not None and tokens > limit:
            raise bad_request(
                f"max_new_tokens must be at most {limit}: the workers' model length (max_model_len, prompt included).",
                "max_new_tokens",
            )
        if fields.ref_audio is not None and fields.ref_audio != accepted_ref_audio:
            # Never let a client make a worker fetch any URL; the URL is rebuilt around the
            # host the allow-list matched, so the worker fetches from that host.
            fields = replace(fields, ref_audio=await self._ref_audio.accept(fields.ref_audio))
        return fields

    def build(self, fields: SpeechFields, text: str, *, owner: str) -> dict[str, Any]:
        """The worker's request for ``text``; raises a 400 ``GatewayError`` for a voice that
        names none of ``owner``'s (the caller's: ``gateway.voices.owners``) or a prompt no worker
        can hold. Always raw PCM as a stream: the gateway encodes for the client."""
        payload: dict[str, Any] = {"model": self._served_model, "input": text, "response_format": "pcm", "stream_format": "audio"}
        voice = resolve_voice(fields.voice, self._voices, self._store, owner=owner)
        if voice is not None:
            payload["voice"] = voice
        for field in FORWARDED_FIELDS:
            value = getattr(fields, field)
            if value is not None:
                payload[field] = value
        if self._prompt is not None:
            room = self._room_for_audio(self._prompt, fields, voice, text)
            if fields.max_new_tokens is not None and fields.max_new_tokens > room:
                # What the worker would do (it stops at max_model_len), on the bound: the
                # budget forwarded is one the worker can always spend in full.
                payload["max_new_tokens"] = room
        return payload

    def is_uploaded_voice(self, voice: object) -> bool:
        """Whether a payload's ``voice`` is one the gateway registered (a voice clone)."""
        return isinstance(voice, str) and self._store.get(voice) is not None

    def reference_seconds(self, payload: dict[str, Any]) -> float | None:
        """The length of the clip a worker payload clones from, when the gateway knows it:
        an uploaded voice's (measured at upload), an inline WAV's (its header). None: no
        clip, or one the worker fetches (a URL) or decodes (another container) first."""
        ref_audio = payload.get("ref_audio")
        if isinstance(ref_audio, str):
            return data_uri_seconds(ref_audio) if ref_audio[:5].lower() == "data:" else None
        voice = payload.get("voice")
        uploaded = self._store.get(voice) if isinstance(voice, str) else None
        return uploaded.duration_s if uploaded is not None else None

    def _room_for_audio(self, prompt: PromptBound, fields: SpeechFields, voice: str | None, text: str) -> int:
        """The prompt as the worker builds it: a reference clip (``ref_audio``, else an
        uploaded voice's clip) brings ``ref_text`` (the request's, else the voice's)."""
        if fields.ref_audio is not None:
            inline = fields.ref_audio if fields.ref_audio[:5].lower() == "data:" else None
            return prompt.room_for_audio(text, fields.ref_text, Reference(None, inline))
        uploaded = self._store.get(voice) if voice is not None else None
        if uploaded is None:
            return prompt.room_for_audio(text, None, None)  # no clip: the worker ignores ref_text
        own = fields.ref_text if fields.ref_text and fields.ref_text.strip() else None
        return prompt.room_for_audio(
            text, own or uploaded.ref_text, Reference(uploaded.duration_s, field="voice"), "ref_text" if own else "voice"
        )
