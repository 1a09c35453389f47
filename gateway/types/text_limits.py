"""Length caps of a speech request's text fields, shared by ``POST /v1/audio/speech`` and
voice sessions (whose config and sentences become the same worker requests)."""

from __future__ import annotations

MAX_INPUT_CHARS = 4096  # OpenAI's `input` cap; also instructions and ref_text
MAX_NAME_CHARS = 256  # model, voice
MAX_LANGUAGE_CHARS = 64
MAX_REF_AUDIO_CHARS = 20 * 1024 * 1024
