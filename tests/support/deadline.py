"""Awaiting with a deadline in tests, cancellation-safe."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(seconds: float, awaitable: Awaitable[T]) -> T:
    """``await awaitable``, or ``TimeoutError`` after ``seconds``.

    ``asyncio.timeout`` rather than ``asyncio.wait_for``: on Python 3.11 ``wait_for``
    returns a result that arrived as its caller was cancelled, swallowing the cancel.
    """
    async with asyncio.timeout(seconds):
        return await awaitable
