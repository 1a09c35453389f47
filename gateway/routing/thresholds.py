"""The run-time routing config: validated patches, applied atomically, kept across restarts.

The store keeps the operator's *overrides* (every patch deep-merged), not a copy of the
whole section: the effective config is always the config file's ``routing`` section with
the overrides on top, so a later edit of a key nobody overrode in the file still applies.
``reset()`` drops the overrides.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.atomic import write_atomically
from gateway.config import ConfigError, RoutingConfig, RoutingThresholds, format_validation_error
from gateway.worker.profile import deep_merge
from gateway.routing.capacity import balanced_threshold
from gateway.types.view import LoadView

log = logging.getLogger(__name__)

# Where the overrides live inside the gateway's data directory.
ROUTING_STATE_FILE = "routing.json"
_FORMAT_VERSION = 1


class ThresholdUpdateError(ConfigError):
    """A patch that would make the routing config invalid; nothing was changed.

    ``errors`` lists (key path, message), e.g. ("thresholds.balanced_hysteresis", "...").
    """

    def __init__(self, message: str, errors: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.errors = errors


class ThresholdStore:
    def __init__(self, path: Path, initial: RoutingConfig) -> None:
        self._path = Path(path)
        self._initial = initial
        self._lock = threading.Lock()
        self._overrides: dict[str, Any] = {}
        self._current = initial
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the file we last read or wrote
        self._restore()

    @classmethod
    def in_data_dir(cls, data_dir: Path, initial: RoutingConfig) -> ThresholdStore:
        return cls(Path(data_dir) / ROUTING_STATE_FILE, initial)

    @property
    def path(self) -> Path:
        return self._path

    def current(self) -> RoutingConfig:
        return self._current

    def thresholds(self) -> RoutingThresholds:
        """Provider for admission: one attribute read, no lock needed (the swap is atomic)."""
        return self._current.thresholds

    def overrides(self) -> dict[str, Any]:
        return copy.deepcopy(self._overrides)

    def update(self, patch: Mapping[str, Any]) -> RoutingConfig:
        """Deep-merge ``patch`` (keys as in the config's ``routing`` section) and apply it.

        Validates first, persists second, swaps in memory last: a bad patch or a failed
        write leaves everything as it was.
        """
        if not isinstance(patch, Mapping):
            raise ThresholdUpdateError(
                "invalid routing update:\n  <root>: must be an object", [("<root>", "must be an object")]
            )
        with self._lock:
            overrides = deep_merge(self._overrides, dict(patch))
            updated = self._validated(overrides)
            write_atomically(self._path, json.dumps({"version": _FORMAT_VERSION, "overrides": overrides}, indent=2))
            self._overrides, self._current = overrides, updated
            self._seen = self._stamp()
            return updated

    def validated(self, overrides: dict[str, Any]) -> RoutingConfig:
        """The config ``overrides`` would give; raises ThresholdUpdateError if invalid."""
        return self._validated(overrides)

    def replace_overrides(self, overrides: dict[str, Any], persist: bool = True) -> bool:
        """Take the whole overrides document from the shared store (written and validated
        by another replica); True if the effective config changed. An override this
        version cannot use is logged and left out, never applied. ``persist=False``
        applies it in memory only: call ``persist()`` off the event loop (an fsync)."""
        with self._lock:
            if overrides == self._overrides:
                return False
            try:
                updated = self._validated(overrides)
            except ThresholdUpdateError as exc:
                log.error("ignoring unusable shared routing overrides: %s", exc)
                return False
            before = self._current
            self._overrides, self._current = copy.deepcopy(overrides), updated
        if persist:
            self.persist()
        return updated != before

    def persist(self) -> None:
        """Write the current overrides to the file (this replica's copy of the shared ones)."""
        with self._lock:
            write_atomically(self._path, json.dumps({"version": _FORMAT_VERSION, "overrides": self._overrides}, indent=2))
            self._seen = self._stamp()

    def reload_if_changed(self) -> bool:
        """Pick up a change another gateway replica wrote to the shared data directory.

        Replicas share the file, not memory: without this an admin change made through
        one replica would only reach the others at their next restart.
        """
        with self._lock:
            stamp = self._stamp()
            if stamp == self._seen:
                return False
            before = self._current
            self._restore()
            return self._current != before

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = self._path.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    def reset(self) -> RoutingConfig:
        """Back to the config file's values; the persisted overrides are cleared too."""
        with self._lock:
            write_atomically(self._path, json.dumps({"version": _FORMAT_VERSION, "overrides": {}}, indent=2))
            self._overrides, self._current = {}, self._initial
            self._seen = self._stamp()
            return self._initial

    def _validated(self, overrides: dict[str, Any]) -> RoutingConfig:
        merged = deep_merge(self._initial.model_dump(mode="json"), overrides)
        try:
            return RoutingConfig.model_validate(merged)
        except ValidationError as exc:
            errors = [(".".join(str(p) for p in e["loc"]) or "<root>", e["msg"]) for e in exc.errors()]
            raise ThresholdUpdateError(format_validation_error(exc, source="routing update"), errors) from exc

    def _restore(self) -> None:
        """Overrides persisted by an earlier run win over ``initial``; a bad file is ignored."""
        self._seen = self._stamp()
        try:
            text = self._path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("cannot read routing overrides %s, using the config file's: %s", self._path, exc)
            return
        try:
            document = json.loads(text)
            overrides = document["overrides"]
            if not isinstance(overrides, dict):
                raise TypeError("overrides must be an object")
            self._current = self._validated(overrides)
            self._overrides = overrides
        except (ValueError, KeyError, TypeError) as exc:
            # Includes ThresholdUpdateError: a file valid for an older version may not be now.
            log.error("ignoring unusable routing overrides in %s (the next update replaces it): %s", self._path, exc)
            return
        log.info("routing overrides restored from %s: %s", self._path, overrides)


def effective_thresholds(thresholds: RoutingThresholds, view: LoadView) -> dict[str, float]:
    """Every threshold as a number, defaults resolved against the live view (for gauges and display)."""
    values: dict[str, float] = {}
    for name, value in thresholds.model_dump().items():
        if name == "balanced_threshold":
            value = balanced_threshold(thresholds, view)
        if isinstance(value, int | float):
            values[name] = float(value)
    return values
