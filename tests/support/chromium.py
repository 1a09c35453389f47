"""Headless Chromium for the browser tests: Debian's chromium + chromium-driver, installed when missing."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

PACKAGES = ("chromium", "chromium-driver")


def _found() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@functools.cache
def _install() -> tuple[str, str] | None:
    """(browser, driver) paths, installing the Debian packages if needed and possible."""
    if found := _found():
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return _found()


def chromium_paths() -> tuple[str, str]:
    """Paths of chromium and chromedriver; skips only where they cannot be installed."""
    try:
        found = _install()
    except RuntimeError as exc:  # apt exists but failed: a real problem, not a skip
        pytest.fail(str(exc))
    if found is None:
        pytest.skip("chromium/chromedriver missing and apt-get unavailable (or not root) to install them")
    return found
