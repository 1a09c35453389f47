"""From the ``voice`` a client sends to the name a worker understands, and back to a list.

Higgs has no built-in voices: a worker answers 400 to ``"alloy"``. Clients hard-code
OpenAI's names, so the gateway maps them (through ``voices.aliases``) to a registered
voice or to the model's default voice, and refuses anything else here, with a message that
says how to register a voice, instead of letting one worker fail it.

Order, first match wins: ``"default"`` (any case); an alias from ``voices.aliases``
(operator intent beats everything); a registered voice; an OpenAI voice name (the default
voice). Names compare case-insensitively, as workers do.

Every lookup is the caller's (``owner``, see ``gateway.voices.owners``): a registered
voice is one of the caller's own, and another owner's voice of the same name does not
exist as far as the caller can tell (no error names it). An alias is the operator's: its
target is the admin's voice of that name, else the caller's own.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.config import VoicesConfig
from gateway.voices.errors import VoiceError
from gateway.voices.names import DEFAULT_VOICE, name_key
from gateway.voices.owners import ADMIN
from gateway.voices.store import Voice

UPLOAD_HINT = "Register one with POST /v1/audio/voices (multipart: name, audio_sample, consent)."


class VoiceLookup(Protocol):
    def find(self, owner: str, name: object) -> Voice | None: ...

    def owned_by(self, owner: str) -> list[Voice]: ...


def _unknown(name: str, config: VoicesConfig, store: VoiceLookup, owner: str) -> VoiceError:
    registered = [v.name for v in store.owned_by(owner)][:20]  # the caller's own names only
    choices = "'default'"
    if registered:
        choices += ", a registered voice (" + ", ".join(registered) + ")"
    choices += ", or an OpenAI voice name (" + ", ".join(config.openai_voices) + ")"
    return VoiceError(
        f"Voice {name!r} is not available. Use {choices}. {UPLOAD_HINT}", code="voice_not_found"
    )


def _alias_target(name: str, config: VoicesConfig) -> tuple[bool, str | None]:
    key = name_key(name)
    for alias, target in config.aliases.items():
        if name_key(alias) == key:
            return True, target
    return False, None


def _alias_voice(target: str | None, store: VoiceLookup, owner: str) -> Voice | None:
    if not target:
        return None
    return store.find(ADMIN, target) or store.find(owner, target)


def resolve_voice(
    requested: str | dict[str, Any] | None, config: VoicesConfig, store: VoiceLookup, *, owner: str
) -> str | None:
    """The worker-side voice name for ``owner``'s ``requested``, or None for the model's
    default voice.

    Raises a 400 ``VoiceError`` (param ``voice``) for anything that names no voice.
    """
    if isinstance(requested, dict):
        requested = requested.get("id")
        if not isinstance(requested, str):
            raise VoiceError('voice objects must look like {"id": "<voice name>"}.', code="invalid_voice")
    if requested is None:
        return None
    if not isinstance(requested, str):
        raise VoiceError('voice must be a string or {"id": "<voice name>"}.', code="invalid_voice")
    name = requested.strip()
    if not name or name_key(name) == DEFAULT_VOICE:
        return None
    is_alias, target = _alias_target(name, config)
    if is_alias:
        # An alias whose voice was deleted degrades to the default voice, like an unmapped
        # OpenAI name: clients hard-code these names and must keep working.
        voice = _alias_voice(target, store, owner)
        return voice.worker_name if voice else None
    voice = store.find(owner, name)
    if voice is not None:
        return voice.worker_name
    if name_key(name) in {name_key(v) for v in config.openai_voices}:
        return None
    raise _unknown(name, config, store, owner)


def list_voices(config: VoicesConfig, store: VoiceLookup, *, owner: str) -> dict[str, Any]:
    """The body of the gateway's ``GET /v1/audio/voices`` for ``owner``: its own voices
    and the aliases (``alias_of`` is the target's client-facing name, never a worker name).

    ``voices`` are objects (Open WebUI reads ``voice["id"]`` and falls back to hard-coded
    names when given plain strings); ``uploaded_voices`` keeps the vllm-omni shape for
    clients written against a worker.
    """
    registered = store.owned_by(owner)
    voices: list[dict[str, Any]] = [
        {"id": DEFAULT_VOICE, "name": DEFAULT_VOICE, "type": "default", "description": "the model's own voice"}
    ]
    for voice in registered:
        entry: dict[str, Any] = {"id": voice.name, "name": voice.name, "type": "uploaded"}
        entry.update(voice.public())
        voices.append(entry)
    listed = {name_key(v["id"]) for v in voices}
    alias_names = [*config.aliases, *config.openai_voices]
    for alias in alias_names:
        if name_key(alias) in listed:
            continue
        listed.add(name_key(alias))
        _, target = _alias_target(alias, config)
        resolved = _alias_voice(target, store, owner)
        voices.append(
            {
                "id": alias,
                "name": alias,
                "type": "alias",
                "alias_of": resolved.name if resolved else DEFAULT_VOICE,
                "default_voice": resolved is None,
            }
        )
    return {"voices": voices, "uploaded_voices": [v.public() for v in registered]}
