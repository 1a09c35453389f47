"""Operator drains, persisted: which workers take no new requests, across restarts and replicas.

Kept apart from the fleet's state machine so that file I/O never runs inside it: the
admin route writes here and tells the fleet; the replica upkeep loop reloads what other
replicas wrote and tells the fleet.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from gateway.atomic import write_atomically

log = logging.getLogger("higgs_gateway.drains")
DRAIN_FILE = "drained.json"


class DrainStore:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._stamp: int | None = None
        self.ids: frozenset[str] = self._load()

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> DrainStore:
        return cls(Path(data_dir) / DRAIN_FILE)

    def set(self, worker_id: str, drained: bool) -> None:
        ids = set(self.ids)
        if drained:
            ids.add(worker_id)
        else:
            ids.discard(worker_id)
        write_atomically(self._path, json.dumps(sorted(ids)))
        self.ids = frozenset(ids)
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
