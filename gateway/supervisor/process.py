"""Start and stop one worker process, and everything it spawned.

Each worker leads its own process group (a new session). A real vllm-omni worker forks
one process per stage; if only the leader were signalled, a stage process could outlive
it, keep its GPU memory and port, and make every restart fail. So every signal goes to
the whole group, and the group is killed even after the leader exited on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Protocol

from gateway.supervisor.command import WorkerSpec
from gateway.supervisor.logfile import RotatingLog, pump

# After the leader exits, how long its log pump may keep draining before it is cut off.
PUMP_DRAIN_S = 2.0
# How long SIGKILLed group members may take to disappear before we stop waiting.
GROUP_EXIT_S = 5.0


class WorkerProcess(Protocol):
    """A running worker as the supervisor sees it (fakes implement this in unit tests)."""

    @property
    def pid(self) -> int: ...

    async def wait(self) -> int:
        """Until the process exits; its exit code (negative = killed by that signal)."""

    async def stop(self, timeout_s: float) -> int:
        """SIGTERM the group, SIGKILL it after ``timeout_s``; the exit code."""

    async def kill(self) -> int:
        """SIGKILL the group now; the exit code."""


class Launcher(Protocol):
    async def launch(self, spec: WorkerSpec, log: RotatingLog) -> WorkerProcess:
        """Start the worker; raises OSError when the command cannot be executed at all."""


class SubprocessLauncher:
    """Launches real processes with asyncio; output goes to the worker's rotating log."""

    async def launch(self, spec: WorkerSpec, log: RotatingLog) -> WorkerProcess:
        # A pipe of our own, not asyncio's PIPE: asyncio waits for its pipes to close too,
        # and a grandchild holding them open would make an exited worker look alive.
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                env=dict(spec.env),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return _Subprocess(proc, asyncio.create_task(pump(read_fd, log), name=f"log-{spec.worker_id}"))


class _Subprocess:
    def __init__(self, proc: asyncio.subprocess.Process, pump_task: asyncio.Task[None]) -> None:
        self._proc = proc
        self._pump = pump_task
        self._pgid = proc.pid  # start_new_session: the leader's pid is the group id

    @property
    def pid(self) -> int:
        return self._proc.pid

    async def wait(self) -> int:
        code = await self._proc.wait()
        await self._reap_group()
        return code

    async def stop(self, timeout_s: float) -> int:
        if self._proc.returncode is None:
            # The whole group at once: stage processes shut down beside their leader.
            self._signal_group(signal.SIGTERM)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
            # that lands as the wait completes, and stop() would then never return.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._proc.wait()
        return await self.kill()  # whatever is still there after the grace period

    async def kill(self) -> int:
        self._signal_group(signal.SIGKILL)
        return await self.wait()

    async def _reap_group(self) -> None:
        self._signal_group(signal.SIGKILL)
        # SIGKILL is asynchronous: wait until the members are really gone, or a restart
        # could race the old stage processes for the port and the GPU memory.
        deadline = time.monotonic() + GROUP_EXIT_S
        while group_alive(self._pgid) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # The log pump ends at EOF, once every holder of the pipe is dead.
        # asyncio.wait: neither raises the pump's outcome nor swallows our own cancellation.
        await asyncio.wait({self._pump}, timeout=PUMP_DRAIN_S)
        if not self._pump.done():
            self._pump.cancel()

    def _signal_group(self, sig: signal.Signals) -> None:
        # The group is gone once every member exited (and was reaped): nothing to signal.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pgid, sig)


def group_alive(pgid: int) -> bool:
    """Does any non-zombie process remain in the group? Zombies hold no port or GPU memory,
    and orphans may stay zombies for long under an init that does not reap them."""
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: ask the kernel (counts zombies too)
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()  # the command name may contain spaces
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM when the gateway dies.

    A gateway killed with SIGKILL cannot stop its workers; without this they would keep
    running, hold their ports and GPU memory, and the next gateway's workers would
    crash-loop on "address in use". No-op where prctl is unavailable.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
