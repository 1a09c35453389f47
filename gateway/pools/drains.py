"""Operator drains, persisted: which workers take no new requests, across restarts and replicas.

Kept apart from the fleet's state machine so that file I/O never runs inside it: the
admin route writes here and tells the fleet; the replica upkeep loop (replicas sharing a
data directory) or the shared state store's follower brings what other replicas wrote
and tells the fleet. With a shared store (``mirror``) a change goes there first: a store
that cannot be reached refuses it, and this file is then only this replica's copy.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from gateway.atomic import write_atomically

log = logging.getLogger("higgs_gateway.drains")
DRAIN_FILE = "drained.json"


class DrainMirror(Protocol):
    """The drained set every replica applies, in a shared store (raises to refuse a write)."""

    async def set_drained(self, worker_id: str, drained: bool) -> None: ...


class DrainStore:
    def __init__(self, path: Path, mirror: DrainMirror | None = None) -> None:
        self._path = path
        self._mirror = mirror
        self._lock = threading.Lock()  # the shared store's follower persists on a worker thread
        self._stamp: int | None = None
        self.ids: frozenset[str] = self._load()

    @classmethod
    def in_data_dir(cls, data_dir: Path, mirror: DrainMirror | None = None) -> DrainStore:
        return cls(Path(data_dir) / DRAIN_FILE, mirror)

    async def change(self, worker_id: str, drained: bool) -> None:
        """An operator's drain or undrain: in the shared store first (if any), then here."""
        if self._mirror is not None:
            await self._mirror.set_drained(worker_id, drained)
        self.set(worker_id, drained)

    def set(self, worker_id: str, drained: bool) -> None:
        ids = set(self.ids)
        if drained:
            ids.add(worker_id)
        else:
            ids.discard(worker_id)
        with self._lock:
            write_atomically(self._path, json.dumps(sorted(ids)))
            self.ids = frozenset(ids)
            self._stamp = self._mtime()

    def follow(self, ids: Iterable[str]) -> bool:
        """Take the drained set from the shared store, in memory; True if it changed.
        Keep this replica's copy with ``persist`` (off the event loop: an fsync)."""
        followed = frozenset(ids)
        changed = followed != self.ids
        self.ids = followed
        return changed

    def persist(self) -> None:
        with self._lock:
            write_atomically(self._path, json.dumps(sorted(self.ids)))
            self._stamp = self._mtime()

    def reload_if_changed(self) -> bool:
        """Pick up drains another gateway replica wrote to the shared data directory."""
        if self._mtime() == self._stamp:
            return False
        ids = self._load()
        changed = ids != self.ids
        self.ids = ids
        return changed

    def _mtime(self) -> int | None:
        try:
            return self._path.stat().st_mtime_ns
        except OSError:
            return None

    def _load(self) -> frozenset[str]:
        self._stamp = self._mtime()
        try:
            return frozenset(json.loads(self._path.read_text()))
        except FileNotFoundError:
            return frozenset()
        except (OSError, ValueError, TypeError) as exc:
            log.warning("ignoring unreadable drain state %s: %s", self._path, exc)
            return frozenset()
