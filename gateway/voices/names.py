"""Which strings may name a registered voice.

A name becomes a directory under the data directory, a multipart field and a URL path
segment on every worker, so it is held to a strict pattern: no separators, no leading dot
(no ``..``, no hidden or temporary entries), bounded length. Workers compare names
case-insensitively, so the registry does too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gateway.voices.errors import VoiceError

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_VOICE = "default"  # any case: the model's own voice, never a registered one


def name_key(name: str) -> str:
    """The case-insensitive identity of a voice name (how workers store it)."""
    return name.lower()


def is_valid_name(name: object) -> bool:
    # fullmatch, not match + "$": "$" also matches before a trailing newline.
    return isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None


def validate_name(name: object, reserved: Iterable[str] = ()) -> str:
    """Return ``name`` if it may be registered, else raise a 400 ``VoiceError`` saying why."""
    if not is_valid_name(name):
        raise VoiceError(
            "Invalid voice name: use 1-64 characters from letters, digits, '_', '.', '-', "
            "starting with a letter or digit.",
            code="invalid_voice_name",
            param="name",
        )
    assert isinstance(name, str)
    key = name_key(name)
    if key == DEFAULT_VOICE or key in {name_key(r) for r in reserved}:
        raise VoiceError(
            f"The voice name {name!r} is reserved (it is 'default', an OpenAI voice name or a "
            "configured alias); map OpenAI names to your voices with voices.aliases instead.",
            code="reserved_voice_name",
            param="name",
        )
    return name
