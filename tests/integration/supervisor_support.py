"""Helpers shared by the supervisor integration tests (real processes)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from tests.unit.supervisor.fakes import RecordingSink, until

__all__ = ["RecordingSink", "alive", "pids_in_log", "until", "wait_log"]


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (zombies hold no memory, port or GPU)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def pids_in_log(path: Path, word: str) -> list[int]:
    if not path.exists():
        return []
    return [int(pid) for pid in re.findall(rf"{word} (\d+)", path.read_text(errors="replace"))]


async def wait_log(path: Path, predicate: Any, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not (path.exists() and predicate(path.read_text(errors="replace"))):
            await asyncio.sleep(0.05)
