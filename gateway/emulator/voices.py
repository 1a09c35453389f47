"""Uploaded voices of one emulated worker, kept in its speaker directory.

Mirrors vllm-omni 0.30.0 ``OmniOpenAIServingSpeech.upload_voice`` / ``delete_voice`` /
``_restore_uploaded_speakers`` (``vllm_omni/entrypoints/openai/serving_speech.py``):

- the directory is ``$SPEAKER_SAMPLES_DIR`` and voices found there are restored at start;
- checks run in the real order: name, size (10 MB), MIME type, then under the upload
  lock: evict an existing voice of that name (re-upload overwrites, 200), the voice cap
  (``$SPEAKER_MAX_UPLOADED``, default 1000), decode with soundfile (WAV/FLAC/OGG/MP3 and
  friends; AAC, MP4/M4A and WebM are refused), duration 1-30 s.

The real worker evicts the old voice *before* decoding the new clip, so a refused
re-upload leaves no voice of that name; the emulator does the same.

The files are the emulator's own (JSON + the sample), not the real safetensors.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from gateway.atomic import write_atomically
from gateway.emulator.errors import WorkerError, bad_request

MAX_SAMPLE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_UPLOADED = 1000  # SPEAKER_MAX_UPLOADED default
MIN_SECONDS = 1.0
MAX_SECONDS = 30.0
DEFAULT_VOICE = "default"  # the placeholder every listing includes
_UNSAFE = re.compile(r"[^a-z0-9_.\-]")

ALLOWED_MIME_TYPES = frozenset(
    {"audio/mpeg", "audio/wav", "audio/x-wav", "audio/ogg", "audio/aac", "audio/flac", "audio/webm", "audio/mp4"}
)
_MIME_BY_SUFFIX = (
    (".wav", "audio/wav"), (".mp3", "audio/mpeg"), (".mpeg", "audio/mpeg"), (".flac", "audio/flac"),
    (".ogg", "audio/ogg"), (".aac", "audio/aac"), (".webm", "audio/webm"), (".mp4", "audio/mp4"),
)  # fmt: skip


def upload_mime_type(content_type: str | None, filename: str | None) -> str:
    """The MIME type the real worker records: the part's type, or guessed from the name
    when the client sent ``application/octet-stream``; refused unless in the allowed set."""
    mime = content_type
    if mime == "application/octet-stream":
        lowered = (filename or "").lower()
        mime = next((m for suffix, m in _MIME_BY_SUFFIX if lowered.endswith(suffix)), "audio/wav")
    if mime not in ALLOWED_MIME_TYPES:
        raise bad_request(f"Unsupported MIME type: {mime}. Allowed: {set(ALLOWED_MIME_TYPES)}")
    return mime


def soundfile_container(data: bytes) -> str | None:
    """The container libsndfile (soundfile) would open, from the magic bytes, or None.

    libsndfile reads WAV/RF64, AIFF, FLAC, Ogg (Vorbis/Opus) and MPEG audio; it has no
    AAC, MP4/M4A or Matroska/WebM reader, so those fail to decode on a real worker."""
    head = data[:12]
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:3] == b"ID3":
        return "mp3"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and head[1] & 0x06 != 0:
        return "mp3"  # MPEG audio sync word with a layer set (ADTS/AAC has layer bits 00)
    return None


class VoiceStore:
    def __init__(self, directory: Path, max_uploaded: int = DEFAULT_MAX_UPLOADED) -> None:
        self.directory = directory
        self.max_uploaded = max_uploaded
        directory.mkdir(parents=True, exist_ok=True)
        self._voices: dict[str, dict[str, Any]] = {}
        self._last_created = 0
        self.restored = self._restore()

    def _restore(self) -> int:
        """Rebuild the voices a previous run left (the real ``_restore_uploaded_speakers``)."""
        for meta_path in sorted(self.directory.glob("*.json")):
            try:
                meta = json.loads(meta_path.read_text())
                self._voices[meta["name"].lower()] = meta
                self._last_created = max(self._last_created, int(meta.get("created_at", 0)))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a half-written or foreign file must not stop the worker
        return len(self._voices)

    def names(self) -> set[str]:
        return set(self._voices)

    def voice_list(self) -> list[str]:
        """``voices`` of ``GET /v1/audio/voices``: uploads (lower case) plus ``default``."""
        return sorted(self.names() | {DEFAULT_VOICE})

    def list(self) -> list[dict[str, Any]]:
        """``uploaded_voices``: the fields ``api_server.list_voices`` builds for each voice."""
        out = []
        for key, meta in self._voices.items():
            entry = {
                "name": meta.get("name", key),
                "consent": meta.get("consent", ""),
                "created_at": meta.get("created_at", 0),
                "file_size": meta.get("file_size", 0),
                "mime_type": meta.get("mime_type", ""),
                "embedding_source": "audio",
                "embedding_dim": None,
            }
            for optional in ("ref_text", "speaker_description"):
                if meta.get(optional):
                    entry[optional] = meta[optional]
            out.append(entry)
        return out

    def add(
        self,
        name: str,
        sample: bytes,
        mime_type: str,
        consent: str,
        duration_of: Any,
        ref_text: str | None = None,
        speaker_description: str | None = None,
    ) -> dict[str, Any]:
        """Register a voice; ``duration_of(sample)`` decodes it (None: not decodable)."""
        key = name.lower()
        self._evict(key)
        if len(self._voices) >= self.max_uploaded:
            raise bad_request(
                f"Uploaded voice limit reached ({self.max_uploaded}). Delete an existing voice before "
                "registering a new one, or raise the cap via SPEAKER_MAX_UPLOADED."
            )
        if soundfile_container(sample) is None or (seconds := duration_of(sample)) is None:
            raise bad_request("Could not decode audio file: Error opening <_io.BytesIO>: Format not recognised.")
        if seconds < MIN_SECONDS:
            raise bad_request(
                f"Reference audio too short ({seconds:.1f}s). At least {MIN_SECONDS:.0f}s of clear speech is required."
            )
        if seconds > MAX_SECONDS:
            raise bad_request(
                f"Reference audio too long ({seconds:.1f}s). Maximum {MAX_SECONDS:.0f}s supported — use a shorter clip."
            )
        # Created timestamps strictly increase, so a re-upload is always distinguishable.
        created = max(int(time.time()), self._last_created + 1)
        self._last_created = created
        stem = _UNSAFE.sub("_", key)
        (self.directory / f"{stem}.audio").write_bytes(sample)
        meta: dict[str, Any] = {
            "name": name,
            "consent": consent,
            "created_at": created,
            "mime_type": mime_type,
            "file_size": len(sample),
            "seconds": seconds,  # the emulator's own: what a clone of it costs
        }
        if ref_text:
            meta["ref_text"] = ref_text
        if speaker_description:
            meta["speaker_description"] = speaker_description
        write_atomically(self.directory / f"{stem}.json", json.dumps(meta))
        self._voices[key] = meta
        return meta

    def stored(self, name: str) -> tuple[bytes, dict[str, Any]] | None:
        """An uploaded voice's clip and metadata, or None when it (or its file) is gone."""
        key = name.lower()
        meta = self._voices.get(key)
        if meta is None:
            return None
        try:
            return (self.directory / f"{_UNSAFE.sub('_', key)}.audio").read_bytes(), meta
        except OSError:
            return None

    def delete(self, name: str) -> None:
        key = name.lower()
        if key not in self._voices:
            raise WorkerError(404, f"Voice '{name}' not found")
        self._evict(key)

    def _evict(self, key: str) -> None:
        if self._voices.pop(key, None) is None:
            return
        stem = _UNSAFE.sub("_", key)
        for suffix in (".json", ".audio"):
            (self.directory / f"{stem}{suffix}").unlink(missing_ok=True)


def validate_voice_name(name: str) -> str:
    """``_validate_speaker_name``: trimmed; no empty, ``.``/``..``, separators or NUL."""
    trimmed = (name or "").strip()
    if not trimmed or trimmed in (".", "..") or any(c in trimmed for c in "/\\\x00"):
        raise bad_request(f"Invalid voice name {name!r}: must be non-empty, no path separators or NUL")
    return trimmed
