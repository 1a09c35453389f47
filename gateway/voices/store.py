"""The durable voice registry: ``<data_dir>/voices/<name>/audio.<ext>`` + ``meta.json``.

Each voice is written whole into a hidden staging directory (files fsynced), then renamed
into place in one step and the parent directory fsynced: a crash at any point leaves
either no voice or a complete one, never a half-written voice that the next start would
replay to every worker. Staging and deleted ("trash") directories start with a dot, which
no valid voice name can, so a crash leftover is never mistaken for a voice and is swept
at start-up.

The in-memory index is re-read when the directory's mtime changes, so replicas sharing one
data directory see each other's voices, and a ``get()`` on the speech path costs one stat.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from gateway.config import VoicesConfig
from gateway.types.codec import SAMPLE_RATE
from gateway.voices.errors import VoiceError
from gateway.voices.names import DEFAULT_VOICE, is_valid_name, name_key, validate_name
from gateway.voices.normalise import WAV_EXT, WAV_MIME, normalised_wav
from gateway.voices.owners import ADMIN, is_valid_owner, is_valid_worker_name, worker_name
from gateway.voices.probe import FORMATS_BY_EXT, validate_reference_audio

log = logging.getLogger(__name__)

META_FILE = "meta.json"
STAGING_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
# Leftovers younger than this may belong to another replica's write in progress.
LEFTOVER_MIN_AGE_S = 3600.0

MAX_REF_TEXT_CHARS = 2000
MAX_DESCRIPTION_CHARS = 1000
MAX_CONSENT_CHARS = 256
# A consent field that says "no" must not count as consent just because it is non-empty.
FALSY_CONSENT = frozenset({"", "0", "false", "no", "n", "off", "f", "none", "null"})


@dataclass(frozen=True, slots=True)
class Voice:
    name: str
    created_at: int  # unix seconds
    mime_type: str
    ext: str
    file_size: int
    duration_s: float
    sample_rate: int
    channels: int
    consent: str
    ref_text: str | None = None
    speaker_description: str | None = None
    # Voices stored before voices had owners have none in their meta.json: the admin's.
    owner: str = ADMIN

    @property
    def filename(self) -> str:
        return f"audio.{self.ext}"

    @property
    def worker_name(self) -> str:
        """Its name on workers, on disk and in the shared store (``gateway.voices.owners``)."""
        return worker_name(self.owner, self.name)

    def to_meta(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_meta(cls, meta: Any) -> Voice:
        if not isinstance(meta, dict):
            raise ValueError("meta.json is not an object")
        voice = cls(**meta)  # unknown or missing keys raise TypeError
        if not is_valid_name(voice.name) or voice.ext not in FORMATS_BY_EXT:
            raise ValueError("bad name or extension")
        if not is_valid_owner(voice.owner):
            raise ValueError("bad owner")
        if not isinstance(voice.file_size, int) or voice.file_size <= 0:
            raise ValueError("bad file_size")
        return voice

    def public(self) -> dict[str, Any]:
        """What its owner (and the admin) see: never a server path, never the owner."""
        out: dict[str, Any] = {
            "name": self.name,
            "created_at": self.created_at,
            "mime_type": self.mime_type,
            "file_size": self.file_size,
            "duration_s": round(self.duration_s, 3),
            "consent": self.consent,
        }
        if self.ref_text is not None:
            out["ref_text"] = self.ref_text
        if self.speaker_description is not None:
            out["speaker_description"] = self.speaker_description
        return out


def _check_consent(consent: object) -> str:
    value = consent.strip() if isinstance(consent, str) else ""
    if value.lower() in FALSY_CONSENT:
        raise VoiceError(
            "consent is required: confirm the speaker agreed to having their voice cloned "
            "(send consent=true or a consent record id).",
            code="consent_required",
            param="consent",
        )
    if len(value) > MAX_CONSENT_CHARS or not value.isprintable():
        raise VoiceError(
            f"consent must be at most {MAX_CONSENT_CHARS} printable characters.", param="consent"
        )
    return value


def _optional_text(value: object, param: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise VoiceError(f"{param} must be a string.", param=param)
    value = value.strip()
    if not value:
        return None
    if len(value) > limit or "\x00" in value:
        raise VoiceError(f"{param} must be at most {limit} characters of text.", param=param)
    return value


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    # Makes the rename itself durable; some filesystems refuse directory fsync (harmless).
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class VoiceMirror(Protocol):
    """A store shared by every gateway replica, written before this replica's own copy.

    Called from the worker thread a write runs on. Raises to refuse the write (the shared
    store unreachable); ``put`` returns False when the name is already taken there.
    """

    def put(self, voice: Voice, audio: bytes) -> bool: ...

    def delete(self, name: str) -> dict[str, Any] | None: ...


class VoiceStore:
    """Registered voices on disk. Thread-safe; blocking (call it via ``asyncio.to_thread``
    for writes and audio reads; ``get``/``list`` are cheap enough for the event loop)."""

    def __init__(
        self,
        root: Path,
        config: VoicesConfig | None = None,
        clock: Callable[[], float] = time.time,
        mirror: VoiceMirror | None = None,
    ) -> None:
        self.root = Path(root)
        self._mirror = mirror
        self.config = config or VoicesConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, Voice] | None = None
        self._cache_mtime: int | None = None
        self.root.mkdir(parents=True, exist_ok=True)
        self._sweep_leftovers()
        self._upgrade_to_wav()

    @classmethod
    def in_data_dir(
        cls, data_dir: Path, config: VoicesConfig | None = None, mirror: VoiceMirror | None = None
    ) -> VoiceStore:
        return cls(Path(data_dir) / "voices", config, mirror=mirror)

    # ---- reads -------------------------------------------------------------------

    def list(self) -> list[Voice]:
        """Every owner's voices (the registry's and the admin's view)."""
        return sorted(self._index().values(), key=lambda v: name_key(v.worker_name))

    def owned_by(self, owner: str) -> list[Voice]:
        return sorted((v for v in self._index().values() if v.owner == owner), key=lambda v: name_key(v.name))

    def find(self, owner: str, name: object) -> Voice | None:
        """``owner``'s voice called ``name``; None for any other owner's, whatever its name."""
        return self.get(worker_name(owner, name)) if isinstance(name, str) else None

    def get(self, name: str) -> Voice | None:
        """The voice stored under the worker name ``name`` (``Voice.worker_name``)."""
        return self._index().get(name_key(name)) if isinstance(name, str) else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def audio_path(self, voice: Voice) -> Path:
        return self.root / voice.worker_name / voice.filename

    def read_audio(self, voice: Voice) -> bytes:
        try:
            return self.audio_path(voice).read_bytes()
        except FileNotFoundError as exc:
            raise VoiceError(
                f"Voice {voice.name!r} was deleted.", status=404, code="voice_not_found"
            ) from exc

    # ---- writes ------------------------------------------------------------------

    def reserved_names(self) -> set[str]:
        return {DEFAULT_VOICE, *self.config.openai_voices, *self.config.aliases}

    def add(
        self,
        name: str,
        audio: bytes,
        *,
        consent: object,
        ref_text: object = None,
        speaker_description: object = None,
        owner: str = ADMIN,
        owner_limit: int | None = None,
    ) -> Voice:
        """Validate and durably register ``owner``'s voice; raise ``VoiceError`` (4xx) if it
        is refused. ``owner_limit``: the most voices that owner may have (its tier's)."""
        if not is_valid_owner(owner):
            raise ValueError(f"not a voice owner: {owner!r}")
        name = validate_name(name, reserved=self.reserved_names())
        consent_value = _check_consent(consent)
        ref_text_value = _optional_text(ref_text, "ref_text", MAX_REF_TEXT_CHARS)
        description = _optional_text(speaker_description, "speaker_description", MAX_DESCRIPTION_CHARS)
        limit = self.config.max_upload_bytes
        if len(audio) > limit:
            raise VoiceError(
                f"audio_sample is {len(audio)} bytes; the limit is {limit} bytes.",
                status=413,
                code="file_too_large",
                param="audio_sample",
            )
        self._raise_if_exists(owner, name)  # before decoding: cheap refusal of a duplicate
        self._raise_if_full(owner, owner_limit)
        info = validate_reference_audio(audio, self.config.min_duration_s, self.config.max_duration_s)
        # Workers get (and the store keeps) the clip every one of them can read, whatever came in.
        audio = normalised_wav(audio, info.format, self.config.max_duration_s)
        voice = Voice(
            name=name,
            created_at=int(self._clock()),
            mime_type=WAV_MIME,
            ext=WAV_EXT,
            file_size=len(audio),
            duration_s=info.duration_s,
            sample_rate=SAMPLE_RATE,
            channels=1,
            consent=consent_value,
            ref_text=ref_text_value,
            speaker_description=description,
            owner=owner,
        )
        with self._lock:
            self._raise_if_exists(owner, name)
            self._raise_if_full(owner, owner_limit)
            # The shared store decides first: a name taken there (by another replica, not
            # yet copied here) is a duplicate too, and an unreachable one refuses the write.
            if self._mirror is not None and not self._mirror.put(voice, audio):
                raise VoiceError(
                    f"A voice named {voice.name!r} already exists; delete it first to replace it.",
                    status=409,
                    code="voice_exists",
                    param="name",
                )
            self._write(voice, audio)
            self._cache = None
        log.info(
            "voice registered: %s of %s (%s uploaded, %.2f s)", voice.name, voice.owner, info.format.name, voice.duration_s
        )
        return voice

    def delete(self, name: str) -> Voice | None:
        """Remove the voice stored under the worker name ``name``; returns it, or None."""
        with self._lock:
            shared: Voice | None = None
            if self._mirror is not None:
                meta = self._mirror.delete(name)  # the shared store is the truth
                shared = Voice.from_meta(meta) if meta is not None else None
            voice = self._remove_locked(name) or shared
        if voice is not None:
            log.info("voice deleted: %s of %s", voice.name, voice.owner)
        return voice

    def install(self, voice: Voice, audio: bytes) -> bool:
        """Copy a voice another replica registered (already validated there) into this
        store, replacing a different one by that name; True if anything changed."""
        with self._lock:
            existing = self.get(voice.worker_name)
            if existing == voice:
                return False
            if existing is not None:
                self._remove_locked(existing.worker_name)
            self._write(voice, audio)
            self._cache = None
        return True

    def discard(self, name: str) -> bool:
        """Drop this replica's copy of a voice deleted elsewhere; True if there was one."""
        with self._lock:
            return self._remove_locked(name) is not None

    def _remove_locked(self, name: str) -> Voice | None:
        voice = self.get(name)
        if voice is None:
            return None
        trash = self.root / f"{TRASH_PREFIX}{uuid.uuid4().hex}"
        try:
            os.rename(self.root / voice.worker_name, trash)  # one step: the voice is gone or intact
        except FileNotFoundError:
            self._cache = None
            return None
        _fsync_dir(self.root)
        self._cache = None
        shutil.rmtree(trash, ignore_errors=True)
        return voice

    # ---- internals ---------------------------------------------------------------

    def _raise_if_exists(self, owner: str, name: str) -> None:
        existing = self.find(owner, name)  # only the owner's own names: others' are not seen
        if existing is not None:
            raise VoiceError(
                f"A voice named {existing.name!r} already exists; delete it first to replace it.",
                status=409,
                code="voice_exists",
                param="name",
            )

    def _raise_if_full(self, owner: str, owner_limit: int | None) -> None:
        index = self._index()
        if owner_limit is not None and sum(1 for v in index.values() if v.owner == owner) >= owner_limit:
            raise VoiceError(
                f"You have {owner_limit} voices registered, the most your tier allows; delete one before adding another.",
                code="too_many_voices",
                param="name",
            )
        # Every voice goes to every worker, and a worker holds at most SPEAKER_MAX_UPLOADED.
        limit = self.config.max_voices
        if len(index) >= limit:
            raise VoiceError(
                f"The gateway holds {limit} voices, the most a worker holds; delete one before adding another.",
                code="too_many_voices",
                param="name",
            )

    def _write(self, voice: Voice, audio: bytes) -> None:
        staging = self.root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            _write_synced(staging / voice.filename, audio)
            _write_synced(staging / META_FILE, json.dumps(voice.to_meta(), indent=2).encode())
            _fsync_dir(staging)
            os.rename(staging, self.root / voice.worker_name)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise VoiceError(
                    f"A directory for voice {voice.name!r} already exists but is not a readable voice.",
                    status=409,
                    code="voice_exists",
                    param="name",
                ) from exc
            raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _fsync_dir(self.root)

    def _index(self) -> dict[str, Voice]:
        try:
            mtime = os.stat(self.root).st_mtime_ns
        except FileNotFoundError:
            return {}
        cache = self._cache
        if cache is not None and self._cache_mtime == mtime:
            return cache
        index = self._scan()  # mtime taken first: a change during the scan forces a rescan
        self._cache, self._cache_mtime = index, mtime
        return index

    def _scan(self) -> dict[str, Voice]:
        index: dict[str, Voice] = {}
        for entry in os.scandir(self.root):
            # Staging/trash entries start with a dot and fail the name check: never visible.
            if not is_valid_worker_name(entry.name) or not entry.is_dir(follow_symlinks=False):
                continue
            voice = self._load(Path(entry.path))
            if voice is None:
                continue
            key = name_key(voice.worker_name)
            other = index.get(key)
            if other is not None:
                log.warning("voices %r and %r differ only in case; keeping the older", other.name, voice.name)
                if other.created_at <= voice.created_at:
                    continue
            index[key] = voice
        return index

    def _load(self, directory: Path) -> Voice | None:
        try:
            voice = Voice.from_meta(json.loads((directory / META_FILE).read_text()))
            if voice.worker_name != directory.name:
                raise ValueError(f"meta.json names {voice.worker_name!r}")
            audio = os.lstat(directory / voice.filename)
            if not stat.S_ISREG(audio.st_mode):  # a planted symlink must not be replayed
                raise ValueError("audio is not a regular file")
            if audio.st_size != voice.file_size:
                raise ValueError("audio size does not match meta.json")
        except (OSError, ValueError, TypeError) as exc:
            log.warning("ignoring unreadable voice directory %s: %s", directory.name, exc)
            return None
        return voice

    def _upgrade_to_wav(self) -> None:
        """Rewrite voices stored before uploads were normalised (``audio.webm``, ``.m4a``...)
        as WAV once: a worker decodes samples with soundfile, which may not read them.

        The new ``audio.wav`` is written beside the old file, then ``meta.json`` is replaced
        in one step: a crash leaves the old voice or the new one, never neither. The root's
        mtime is bumped so other replicas re-read the index."""
        upgraded = 0
        for voice in self.list():
            if voice.ext == WAV_EXT:
                continue
            directory = self.root / voice.worker_name
            try:
                fmt = FORMATS_BY_EXT[voice.ext]
                audio = normalised_wav(self.read_audio(voice), fmt, self.config.max_duration_s)
                wav = replace(
                    voice, mime_type=WAV_MIME, ext=WAV_EXT, file_size=len(audio), sample_rate=SAMPLE_RATE, channels=1
                )
                with self._lock:
                    (directory / wav.filename).unlink(missing_ok=True)  # a leftover of a crashed upgrade
                    _write_synced(directory / wav.filename, audio)
                    staged_meta = directory / f"{STAGING_PREFIX}{META_FILE}"
                    staged_meta.unlink(missing_ok=True)
                    _write_synced(staged_meta, json.dumps(wav.to_meta(), indent=2).encode())
                    os.replace(staged_meta, directory / META_FILE)
                    _fsync_dir(directory)
                    (directory / voice.filename).unlink(missing_ok=True)
                    self._cache = None
            except (OSError, VoiceError) as exc:
                log.warning("voice %s stays %s: cannot convert it to WAV: %s", voice.name, voice.ext, exc)
                continue
            upgraded += 1
        if upgraded:
            os.utime(self.root)  # the index is keyed on the root's mtime
            log.info("converted %d stored voice(s) to 24 kHz mono WAV for the workers", upgraded)

    def _sweep_leftovers(self) -> None:
        now = time.time()
        for entry in os.scandir(self.root):
            if not entry.name.startswith((STAGING_PREFIX, TRASH_PREFIX)):
                continue
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime < LEFTOVER_MIN_AGE_S:
                    continue
            except OSError:
                continue
            log.info("removing leftover %s from an interrupted voice write", entry.name)
            shutil.rmtree(entry.path, ignore_errors=True)
