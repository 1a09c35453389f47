"""Worker logs: size rotation and the pipe pump."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from gateway.supervisor.logfile import RotatingLog, pump
from tests.support.deadline import within


def test_rotates_by_size_and_keeps_backups(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "w.log"
    log = RotatingLog(path, max_bytes=100, backups=2)
    for i in range(10):
        log.write(f"{i}".encode() * 60)
    log.close()
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["w.log", "w.log.1", "w.log.2"]
    assert path.read_bytes() == b"9" * 60
    assert (path.parent / "w.log.1").read_bytes() == b"8" * 60
    assert all(p.stat().st_size <= 100 for p in path.parent.iterdir())


def test_no_backups_starts_the_file_over(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path / "w.log", max_bytes=10, backups=0)
    log.write(b"a" * 8)
    log.write(b"b" * 8)
    log.close()
    assert [p.name for p in tmp_path.iterdir()] == ["w.log"]
    assert (tmp_path / "w.log").read_bytes() == b"b" * 8


def test_appends_across_restarts(tmp_path: Path) -> None:
    for word in (b"one\n", b"two\n"):
        log = RotatingLog(tmp_path / "w.log", 1000, 1)
        log.write(word)
        log.close()
    assert (tmp_path / "w.log").read_bytes() == b"one\ntwo\n"


async def test_pump_copies_a_pipe_until_eof(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path / "w.log", 1 << 20, 1)
    read_fd, write_fd = os.pipe()
    task = asyncio.create_task(pump(read_fd, log))
    os.write(write_fd, b"hello\n" * 1000)
    log.note("marker")
    os.close(write_fd)
    await within(10, task)
    log.close()
    text = (tmp_path / "w.log").read_text()
    assert text.count("hello\n") == 1000
    assert "--- supervisor: marker" in text


def test_big_chunks_split_at_line_ends(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path / "w.log", max_bytes=25, backups=5)
    log.write(b"".join(f"line{i:05}\n".encode() for i in range(6)))  # 6 x 10 bytes at once
    log.write(b"y" * 60)  # one line longer than a file: cut
    log.close()
    files = sorted(tmp_path.iterdir())
    assert all(p.stat().st_size <= 25 for p in files)
    assert (tmp_path / "w.log.5").read_bytes() == b"line00000\nline00001\n"


async def test_pump_keeps_draining_when_the_log_cannot_be_written(tmp_path: Path) -> None:
    log = RotatingLog(tmp_path / "w.log", 1 << 20, 1)
    log.close()  # every write now fails
    read_fd, write_fd = os.pipe()
    task = asyncio.create_task(pump(read_fd, log))

    def feed() -> None:  # more than a pipe buffer: blocks unless the pump keeps reading
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(b"x" * 300_000)

    await within(10, asyncio.to_thread(feed))
    await within(10, task)
