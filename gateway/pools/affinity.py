"""Which workers (probably) hold a request's encoded reference: the voice-affinity hint.

A voice clone (an uploaded voice, or an inline ``ref_audio``) costs its worker an encode of
the reference clip into codec tokens unless that worker's reference-code cache holds it
(vllm-omni 0.30.0 ``tts_adapters/higgs_audio_v3.py`` 22-23, 96-160: an LRU of 256 entries
and 64 MiB). The worker exposes neither the cache nor its contents, so the gateway infers
them: every worker that served a request with a reference cached that reference's codes,
and the least recently used go first. This mirrors the worker's cache by entries only: 256
clips of at most 30 s take 12 MiB of codes, far under the byte bound.

The hint is data for the routing policy (``RequestInfo.warm_workers``); a wrong guess only
costs one encode, as without the hint. A worker that restarted (or left) starts cold.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

# tts_adapters/higgs_audio_v3.py _REF_CODE_CACHE_MAX_ENTRIES
WORKER_CODE_CACHE_ENTRIES = 256


def reference_key(payload: Mapping[str, Any], uploaded_voice: bool) -> str | None:
    """What a worker caches the request's reference under, as far as the gateway can tell:
    the ``ref_audio`` string (the worker keys its resolved audio by it; the same string is the
    same clip) or the uploaded voice's name. None: no reference (a built-in voice)."""
    ref_audio = payload.get("ref_audio")
    if isinstance(ref_audio, str) and ref_audio:
        return "ref:" + hashlib.sha1(ref_audio.encode()).hexdigest()
    voice = payload.get("voice")
    if uploaded_voice and isinstance(voice, str):
        return "voice:" + voice
    return None


class ReferenceAffinity:
    """Per worker, an LRU of the reference keys it served, as large as its code cache."""

    def __init__(self, entries_per_worker: int = WORKER_CODE_CACHE_ENTRIES) -> None:
        self._entries = entries_per_worker
        self._held: dict[str, OrderedDict[str, None]] = {}

    def warm_workers(self, key: str | None) -> frozenset[str]:
        """The workers that served ``key`` recently enough to still hold it."""
        if key is None:
            return frozenset()
        return frozenset(worker_id for worker_id, held in self._held.items() if key in held)

    def served(self, worker_id: str, key: str | None) -> None:
        """``worker_id`` served a request with ``key``: it holds it now, the most recent."""
        if key is None or self._entries <= 0:
            return
        held = self._held.setdefault(worker_id, OrderedDict())
        held[key] = None
        held.move_to_end(key)
        while len(held) > self._entries:
            held.popitem(last=False)

    def forget_worker(self, worker_id: str) -> None:
        """A restarted or removed worker holds nothing."""
        self._held.pop(worker_id, None)

    def forget_key(self, key: str) -> None:
        """A voice deleted or uploaded again: its old codes help nobody."""
        for held in self._held.values():
            held.pop(key, None)
