"""Tools the tests need from Debian's packages: found on PATH, else installed with apt-get
(as root), else the test is skipped. A failed apt-get fails the test: a broken install
must not pass as a skip."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


@functools.cache
def _apt_install(packages: tuple[str, ...]) -> bool:
    """True once installed; False where apt-get cannot run. Once per package set per session."""
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return True


def debian_tool(find: Callable[[], T | None], *packages: str) -> T:
    """What ``find`` returns, installing ``packages`` first when it finds nothing."""
    if (found := find()) is not None:
        return found
    try:
        installed = _apt_install(packages)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    if not installed:
        pytest.skip(f"{', '.join(packages)} missing and apt-get unavailable (or not root) to install")
    if (found := find()) is None:
        pytest.fail(f"installed {', '.join(packages)} but still not found on PATH")
    return found
