"""Timeouts never swallow a cancellation: ``asyncio.timeout`` everywhere, never ``wait_for``.

On Python 3.11 ``asyncio.wait_for`` returns the result of an operation that finished in
the same step its caller was cancelled: the caller carries on as if nothing happened, and
whatever was stopping it (a shutdown, a client that left) waits for it forever.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import gateway
from gateway.config import StateConfig
from gateway.state.redis_backend import RedisStateBackend


async def test_a_redis_call_cancelled_as_it_finishes_is_cancelled_not_swallowed() -> None:
    # No connection is made: _call only bounds the awaitable it is given.
    backend = RedisStateBackend(StateConfig(backend="redis", redis_url="redis://127.0.0.1:1/0", timeout_s=5))
    answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    caller = asyncio.create_task(backend._call(answer))
    await asyncio.sleep(0)  # the caller now waits for Redis
    answer.set_result(b"OK")  # Redis answers...
    caller.cancel()  # ...in the very step the caller is cancelled
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_a_redis_call_that_takes_too_long_is_state_unavailable() -> None:
    from gateway.state.errors import StateUnavailable

    backend = RedisStateBackend(StateConfig(backend="redis", redis_url="redis://127.0.0.1:1/0", timeout_s=0.01))
    with pytest.raises(StateUnavailable):
        await backend._call(asyncio.Event().wait())
    assert not backend.up


def test_no_module_uses_wait_for() -> None:
    package = Path(gateway.__file__).parent
    offenders = [
        f"{path.relative_to(package.parent)}:{number}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bwait_for\(", line) and not line.lstrip().startswith("#")
    ]
    assert not offenders, f"use asyncio.timeout, not asyncio.wait_for: {offenders}"
