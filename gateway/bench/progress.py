"""A one-line progress display on stderr, hand-rolled to keep the client lean.

On a terminal the line is redrawn in place (at most a few times a second, so drawing
never costs the load generator measurable time); elsewhere (CI logs, pipes) only the
final line of each phase is printed.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_REDRAW_S = 0.2


class Progress:
    def __init__(self, label: str, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self._label = label
        self._total = total
        self._stream = stream or sys.stderr
        self._enabled = enabled
        self._live = enabled and self._stream.isatty()
        self._start = time.monotonic()
        self._last_draw = 0.0
        self.done = 0
        self.errors = 0

    def update(self, ok: bool) -> None:
        self.done += 1
        self.errors += 0 if ok else 1
        now = time.monotonic()
        if self._live and (now - self._last_draw >= _REDRAW_S or self.done == self._total):
            self._last_draw = now
            self._stream.write("\r" + self._line(now))
            self._stream.flush()

    def close(self) -> None:
        if not self._enabled:
            return
        line = self._line(time.monotonic())
        self._stream.write(("\r" + line + "\n") if self._live else line + "\n")
        self._stream.flush()

    def _line(self, now: float) -> str:
        width = 24
        filled = int(width * self.done / self._total) if self._total else width
        bar = "#" * filled + "." * (width - filled)
        return (
            f"{self._label:<18} [{bar}] {self.done}/{self._total}"
            f"  errors {self.errors}  {now - self._start:6.1f}s"
        )
