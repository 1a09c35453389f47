"""The released worker's two reference caches, and what a voice-clone prompt costs with them.

vllm-omni 0.30.0 keeps, per worker process:

* the **resolved reference audio** (``serving_speech.py`` 113-114, 257-260, 1289-1345,
  1405-1432): keyed by the ``ref_audio`` string itself (a SHA-1 of it: a URL is never
  fetched again to check it changed, so a cached URL keeps working after its host went
  down), an LRU of 1024 entries / 512 MB of float32 samples;
* the **encoded reference codes** (``tts_adapters/higgs_audio_v3.py`` 22-23, 96-160): keyed
  by a hash of the decoded waveform (the "artifact key", ``serving_speech.py`` 1383-1389),
  an LRU of 256 entries / 64 MiB of int64 code rows. A hit encodes nothing; a request that
  meets an encode in flight waits for it rather than encoding again (111-113).

An uploaded voice becomes a voice clone: its stored clip as a WAV ``data:`` URL (memoized
per voice, 694-718) plus its ``ref_text`` (749-804), so it goes through both caches like any
inline ``ref_audio``. Neither cache is exposed by the real worker (no metric, no endpoint):
a gateway that wants voice affinity must infer what a worker holds from where it sent what.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

MIB = 1024 * 1024
RESOLVE_CACHE_MAX_ENTRIES = 1024  # serving_speech.py _REF_AUDIO_RESOLVE_CACHE_MAX_ENTRIES
RESOLVE_CACHE_MAX_BYTES = 512 * MIB  # _REF_AUDIO_RESOLVE_CACHE_MAX_BYTES
CODE_CACHE_MAX_ENTRIES = 256  # higgs_audio_v3.py _REF_CODE_CACHE_MAX_ENTRIES
CODE_CACHE_MAX_BYTES = 64 * MIB  # _REF_CODE_CACHE_MAX_BYTES
CODEBOOKS = 8  # Higgs-Audio V3 codec: 8 codebooks per frame
CODE_BYTES = 8  # cached as torch.long (higgs_audio_v3.py 146)
SAMPLE_BYTES = 4  # resolved audio cached as float32 (serving_speech.py 1412-1416)


class LruBytesCache(Generic[K, V]):
    """An LRU bounded by entries and bytes, evicting as the released caches do: an entry
    larger than the byte bound is not stored; the oldest go first while either bound is exceeded."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.bytes = 0

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: K, value: V, size: int) -> None:
        if self.max_entries <= 0 or self.max_bytes <= 0 or size > self.max_bytes:
            return
        previous = self._entries.pop(key, None)
        if previous is not None:
            self.bytes -= previous[1]
        self._entries[key] = (value, size)
        self.bytes += size
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            _, (_, old_size) = self._entries.popitem(last=False)
            self.bytes -= old_size

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


@dataclass(frozen=True)
class ResolvedClip:
    """A decoded reference clip, as the resolve cache holds it."""

    seconds: float
    sample_rate: int
    artifact_key: str  # what its encoded codes are cached under

    @property
    def nbytes(self) -> int:
        return round(self.seconds * self.sample_rate) * SAMPLE_BYTES


@dataclass(frozen=True)
class EncodedCodes:
    rows: int  # delay-pattern rows: the clip's codec frames + 7
    ready_at: float  # model time the encode finished (or will: one in flight)

    @property
    def nbytes(self) -> int:
        return self.rows * CODEBOOKS * CODE_BYTES


def resolve_cache_key(ref_audio: str) -> str:
    """serving_speech.py _get_ref_audio_cache_key 1202-1258: a SHA-1 of the string (no file
    is ever stat'ed here: local files are refused without --allowed-local-media-path)."""
    return hashlib.sha1(ref_audio.encode()).hexdigest()


def artifact_key(clip: bytes) -> str:
    """Stands in for the hash of the decoded waveform: the same clip, wherever it came from."""
    return hashlib.sha1(clip).hexdigest()


class ReferenceCaches:
    def __init__(self) -> None:
        self.resolved: LruBytesCache[str, ResolvedClip] = LruBytesCache(RESOLVE_CACHE_MAX_ENTRIES, RESOLVE_CACHE_MAX_BYTES)
        self.codes: LruBytesCache[str, EncodedCodes] = LruBytesCache(CODE_CACHE_MAX_ENTRIES, CODE_CACHE_MAX_BYTES)
        # Emulator-only counts (the real worker counts neither): prompts whose codes were
        # cached (a wait for an encode in flight counts as a hit: it encodes nothing), and
        # prompts that encoded their clip.
        self.code_hits = 0
        self.code_misses = 0

    def encode_wait(self, clip: ResolvedClip, rows: int, now: float, encode_seconds: float) -> float:
        """Model seconds this request waits for the clip's codes: 0 on a hit, the rest of an
        encode in flight, or a whole encode (then cached) on a miss."""
        cached = self.codes.get(clip.artifact_key)
        if cached is not None:
            self.code_hits += 1
            return max(0.0, cached.ready_at - now)
        self.code_misses += 1
        codes = EncodedCodes(rows, now + encode_seconds)
        self.codes.put(clip.artifact_key, codes, codes.nbytes)
        return encode_seconds

    def state(self) -> dict[str, int]:
        return {
            "resolved_audio_entries": len(self.resolved),
            "resolved_audio_bytes": self.resolved.bytes,
            "reference_code_entries": len(self.codes),
            "reference_code_bytes": self.codes.bytes,
            "reference_code_hits": self.code_hits,
            "reference_code_misses": self.code_misses,
        }
