"""The session's messages: client frames parsed and checked, server messages built.

Texts, limits and field order are the released worker's (``serving_speech_stream.py``),
so a client written for it reads the same answers; ``input.cancel`` / ``input.cancelled``
are the gateway's extension. Sizes count characters, as the worker counts them.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_MESSAGE_CHARS = 4 * 1024 * 1024  # any message
MAX_TEXT_MESSAGE_CHARS = 128 * 1024  # any message but session.config
STREAM_SAMPLE_RATE = 24000  # advertised in audio.start of a streamed session, as the worker does

CONFIG_DURING_UTTERANCE = "session.config cannot be applied while an utterance is in progress; send input.done first"
NO_FORCED_ALIGNER = (
    "word_timestamps=true but the server was launched without --forced-aligner; either restart the server "
    "with that flag or set word_timestamps=false in session.config."
)
BINARY_FRAME = "Internal error: 'text'"  # what the worker's receive_text answers a binary frame


class Refused(Exception):
    """A client message answered with an error and not acted on."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse(raw: str) -> dict[str, Any]:
    """One client message as a JSON object, or ``Refused`` with the worker's text."""
    if len(raw) > MAX_MESSAGE_CHARS:
        raise Refused("WebSocket message too large")
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Refused("Invalid JSON message") from None
    if not isinstance(message, dict):
        raise Refused("WebSocket messages must be JSON objects")
    if message.get("type") != "session.config" and len(raw) > MAX_TEXT_MESSAGE_CHARS:
        raise Refused("input.text message too large")
    return message


def encode(message: dict[str, Any]) -> str:
    """Compact JSON, fields in the order built (the worker's own layout)."""
    return orjson.dumps(message).decode()


def error(message: str, *, partial_audio: bool = False) -> dict[str, Any]:
    payload: dict[str, Any] = {"type": "error", "message": message}
    if partial_audio:
        payload.update(partial_audio=True, action="discard")
    return payload


def audio_start(utterance: int, sentence: int, text: str, fmt: str, streamed: bool) -> dict[str, Any]:
    start: dict[str, Any] = {
        "type": "audio.start", "utterance_index": utterance, "sentence_index": sentence, "sentence_text": text, "format": fmt,
    }  # fmt: skip
    if streamed:
        start["sample_rate"] = STREAM_SAMPLE_RATE
    return start


def audio_done(utterance: int, sentence: int, total_bytes: int, failed: bool) -> dict[str, Any]:
    return {"type": "audio.done", "utterance_index": utterance, "sentence_index": sentence, "total_bytes": total_bytes, "error": failed}


def session_done(utterance: int, total_sentences: int) -> dict[str, Any]:
    return {"type": "session.done", "utterance_index": utterance, "total_sentences": total_sentences}


def cancelled(utterance: int, total_bytes: int) -> dict[str, Any]:
    return {"type": "input.cancelled", "utterance_index": utterance, "total_bytes": total_bytes}


def generation_failed(utterance: int, sentence: int, reason: str) -> str:
    return f"Generation failed for utterance {utterance}, sentence {sentence}: {reason}"
