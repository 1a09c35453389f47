"""The released worker's spellings of speech fields, read the way the worker reads them.

vllm-omni 0.30.0 (``protocol/audio.py``, ``OpenAICreateSpeechRequest``) takes the Higgs
cookbook's ``references: [{"audio_path", "text"}]`` for ``ref_audio``/``ref_text``
(``normalize_references_alias``) and ``speaker`` for ``voice``. The refusals below carry
the worker's own messages, so a client sees the same sentence through the gateway as
from a worker.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import bad_request


def normalize_references(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with ``references`` folded into ``ref_audio``/``ref_text`` (one reference only)."""
    refs = document.get("references")
    if refs is None:
        return {key: value for key, value in document.items() if key != "references"}
    if not isinstance(refs, list) or len(refs) == 0:
        raise bad_request("'references' must be a non-empty array of {audio_path, text} objects", "references")
    if len(refs) > 1:
        raise bad_request(
            "'references' only supports a single reference; multi-shot voice clone is not supported", "references"
        )
    first = refs[0]
    if not isinstance(first, dict):
        raise bad_request("'references[0]' must be an object with 'audio_path' and optional 'text'", "references")
    audio_path = first.get("audio_path")
    if not isinstance(audio_path, str) or not audio_path:
        raise bad_request(
            "'references[0].audio_path' is required and must be a string (URL, data: URI, or file path)", "references"
        )
    existing_ref_audio = document.get("ref_audio")
    if existing_ref_audio and existing_ref_audio != audio_path:
        raise bad_request("'references' and 'ref_audio' are mutually exclusive", "references")
    normalized = {key: value for key, value in document.items() if key != "references"}
    normalized["ref_audio"] = audio_path
    text = first.get("text")
    if isinstance(text, str) and text.strip():
        existing_ref_text = document.get("ref_text")
        if existing_ref_text and existing_ref_text != text:
            raise bad_request("'references[0].text' and 'ref_text' conflict; supply only one", "references")
        normalized["ref_text"] = text
    return normalized
