"""Headless Chromium for the browser tests: Debian's chromium + chromium-driver, installed when missing."""

from __future__ import annotations

import shutil

from tests.support.debian import debian_tool

PACKAGES = ("chromium", "chromium-driver")


def _found() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def chromium_paths() -> tuple[str, str]:
    """Paths of chromium and chromedriver, installed when missing."""
    return debian_tool(_found, *PACKAGES)
