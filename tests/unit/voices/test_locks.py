import asyncio

import pytest

from gateway.voices.locks import NameLocks
from tests.support.deadline import within


async def _hold(locks, name, exclusive, log, tag, release):
    async with locks.hold(name, exclusive):
        log.append(f"+{tag}")
        await release.wait()
        log.append(f"-{tag}")


async def test_shared_holders_overlap_exclusive_waits():
    locks, log = NameLocks(), []
    release = asyncio.Event()
    tasks = [asyncio.create_task(_hold(locks, "v", False, log, f"r{i}", release)) for i in range(2)]
    tasks.append(asyncio.create_task(_hold(locks, "V", True, log, "w", release)))  # same name, any case
    await asyncio.sleep(0.01)
    assert log == ["+r0", "+r1"]
    release.set()
    await asyncio.gather(*tasks)
    assert log.index("+w") > log.index("-r0") and log.index("+w") > log.index("-r1")
    assert len(locks) == 0  # unused locks are dropped


async def test_waiting_writer_is_not_starved_by_later_readers():
    locks, log = NameLocks(), []
    first, rest = asyncio.Event(), asyncio.Event()
    reader = asyncio.create_task(_hold(locks, "v", False, log, "r0", first))
    await asyncio.sleep(0)
    writer = asyncio.create_task(_hold(locks, "v", True, log, "w", rest))
    await asyncio.sleep(0)
    late = asyncio.create_task(_hold(locks, "v", False, log, "r1", rest))
    await asyncio.sleep(0.01)
    first.set()
    rest.set()
    await asyncio.gather(reader, writer, late)
    assert log.index("+w") < log.index("+r1")


async def test_other_names_do_not_block():
    locks = NameLocks()
    async with locks.exclusive("a"):
        await within(0.5, _enter(locks, "b"))


async def _enter(locks, name):
    async with locks.exclusive(name):
        return True


async def test_cancelled_waiter_leaves_the_lock_usable():
    locks = NameLocks()
    release = asyncio.Event()
    holder = asyncio.create_task(_hold(locks, "v", True, [], "h", release))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(_enter(locks, "v"))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    await holder
    assert await within(0.5, _enter(locks, "v"))
    assert len(locks) == 0
