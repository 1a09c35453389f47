"""Uploaded voices of one emulated worker, kept under its ``--voices-dir``.

Like the real worker, a voice lives on that worker's disk only: other workers never see
it, which is what the gateway's voice registry has to cope with. Names are matched
case-insensitively; metadata sits beside the sample as JSON.
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
_UNSAFE = re.compile(r"[^a-z0-9_.\-]")


class VoiceStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._voices: dict[str, dict[str, Any]] = {}
        self._last_created = 0
        for meta_path in sorted(directory.glob("*.json")):
            try:
                meta = json.loads(meta_path.read_text())
                self._voices[meta["name"].lower()] = meta
                self._last_created = max(self._last_created, int(meta.get("created_at", 0)))
            except (ValueError, KeyError, TypeError):
                continue  # a half-written or foreign file must not stop the worker

    def names(self) -> set[str]:
        return set(self._voices)

    def list(self) -> list[dict[str, Any]]:
        return [self._voices[name] for name in sorted(self._voices)]

    def add(
        self,
        name: str,
        sample: bytes,
        mime_type: str,
        duration_seconds: float,
        ref_text: str | None = None,
        speaker_description: str | None = None,
    ) -> dict[str, Any]:
        trimmed = name.strip()
        if not trimmed or trimmed in (".", "..") or any(c in trimmed for c in "/\\\x00"):
            raise bad_request(f"Invalid voice name {name!r}: must be non-empty, no path separators or NUL", "name")
        key = trimmed.lower()
        if key in ("default",):
            raise bad_request("'default' is reserved and cannot be uploaded", "name")
        if key in self._voices:
            raise bad_request(f"Voice '{trimmed}' already exists; delete it first", "name")
        if len(sample) > MAX_SAMPLE_BYTES:
            raise bad_request(f"audio_sample exceeds {MAX_SAMPLE_BYTES // (1024 * 1024)} MB", "audio_sample")
        # Created timestamps strictly increase, so a re-upload is always distinguishable.
        created = max(int(time.time()), self._last_created + 1)
        self._last_created = created
        stem = _UNSAFE.sub("_", key)
        sample_path = self.directory / f"{stem}.audio"
        sample_path.write_bytes(sample)
        meta: dict[str, Any] = {
            "name": trimmed,
            "created_at": created,
            "mime_type": mime_type,
            "file_size": len(sample),
            "duration": round(duration_seconds, 3),
        }
        if ref_text:
            meta["ref_text"] = ref_text
        if speaker_description:
            meta["speaker_description"] = speaker_description
        write_atomically(self.directory / f"{stem}.json", json.dumps(meta))
        self._voices[key] = meta
        return meta

    def delete(self, name: str) -> None:
        key = name.strip().lower()
        if key not in self._voices:
            raise WorkerError(404, f"Voice '{name}' not found", "name")
        stem = _UNSAFE.sub("_", key)
        for suffix in (".json", ".audio"):
            (self.directory / f"{stem}{suffix}").unlink(missing_ok=True)
        del self._voices[key]
