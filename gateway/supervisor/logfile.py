"""A worker's stdout+stderr into its own size-rotated log file.

Workers write through a pipe we drain, not straight to a file: a real worker logs every
request stats line for days, and an unrotated file fills the disk that also holds the
voice registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import BinaryIO

READ_CHUNK = 64 * 1024
logger = logging.getLogger("higgs_gateway.supervisor")


class RotatingLog:
    """Append-only bytes log; before a write would pass ``max_bytes`` it rotates to ``.1``..``.N``."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = path.open("ab")

    def write(self, data: bytes) -> None:
        # A pipe read can hold many lines: split so no file passes max_bytes, at a line end
        # when one fits (a single line longer than a whole file is cut).
        while data:
            size = self._file.tell()
            room = self.max_bytes - size
            if len(data) <= room:
                self._file.write(data)
                break
            cut = data.rfind(b"\n", 0, max(room, 0)) + 1
            if cut == 0 and size == 0:
                cut = room
            if cut:
                self._file.write(data[:cut])
                data = data[cut:]
            self._rotate()
        # Flushed per chunk so the file is current when an operator reads it after a crash.
        self._file.flush()

    def note(self, line: str) -> None:
        """A supervisor line (start, exit, kill) among the worker's own output."""
        self.write(f"--- supervisor: {line}\n".encode())

    def close(self) -> None:
        self._file.close()

    def _rotate(self) -> None:
        self._file.close()
        if self.backups > 0:
            for index in range(self.backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{index}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
            self._file = self.path.open("ab")
        else:
            self._file = self.path.open("wb")  # no backups: start the file over


async def pump(read_fd: int, log: RotatingLog) -> None:
    """Copy a pipe into ``log`` until EOF; owns (and closes) ``read_fd``.

    Draining never stops while the worker runs: a full pipe blocks the worker on its next
    print, which looks exactly like a hung GPU.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_CHUNK * 4)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    write_failed = False
    try:
        while chunk := await reader.read(READ_CHUNK):
            try:
                log.write(chunk)
            except (OSError, ValueError) as exc:
                # Disk full or file gone: keep draining (dropping output) rather than let
                # the worker block on a full pipe.
                if not write_failed:
                    logger.error("worker log %s unwritable, dropping output: %s", log.path, exc)
                write_failed = True
    finally:
        with contextlib.suppress(Exception):
            transport.close()
