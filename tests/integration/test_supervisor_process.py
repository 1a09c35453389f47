"""The supervisor with real processes (no emulator): process groups, logs, failures."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from gateway.config import LaunchConfig
from gateway.supervisor.pool import PoolSupervisor
from gateway.supervisor.worker import RunState
from gateway.types import PoolName

from .supervisor_support import RecordingSink, alive, pids_in_log, until, wait_log

pytestmark = pytest.mark.timeout(120)

# Leader prints its pid and a grandchild's, then sleeps: like vllm-omni with stage processes.
FAMILY = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)'])\n"
    "print('leader', os.getpid(), 'child', child.pid, flush=True)\n"
    "print('gpu', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['VLLM_USE_DEEP_GEMM'], flush=True)\n"
    "time.sleep(1000)\n"
)


def supervisor(tmp_path: Path, command: list[str], sink: RecordingSink, **launch: object) -> PoolSupervisor:
    settings: dict[str, object] = {
        "gpus": ["3"],
        "command": command,
        "start_timeout_s": 60.0,
        "stop_timeout_s": 5.0,
        "restart_backoff_initial_s": 0.05,
        "restart_backoff_max_s": 0.2,
        "crash_loop_restarts": 3,
        "crash_loop_window_s": 60.0,
        **launch,
    }
    return PoolSupervisor(
        PoolName.HIGH_THROUGHPUT,
        LaunchConfig(**settings),  # type: ignore[arg-type]
        tmp_path / "ht.yaml",
        sink,
        tmp_path,
        "higgs",
        ready_poll_s=0.1,
    )


async def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    sink = RecordingSink()
    sup = supervisor(tmp_path, [sys.executable, "-c", FAMILY], sink)
    log_path = tmp_path / "logs" / "high_throughput-0.log"
    await sup.start()
    try:
        await wait_log(log_path, lambda text: "gpu 3 0" in text)
        assert "gpu 3 0" in log_path.read_text()
        leader, child = pids_in_log(log_path, "leader")[0], pids_in_log(log_path, "child")[0]
        assert alive(leader) and alive(child)
    finally:
        await sup.stop()
    assert not alive(leader) and not alive(child)
    assert sink.of("high_throughput-0") == ["add", "remove"]
    assert "--- supervisor: stopped" in log_path.read_text()


async def test_leader_crash_takes_its_children_and_restarts(tmp_path: Path) -> None:
    sink = RecordingSink()
    sup = supervisor(tmp_path, [sys.executable, "-c", FAMILY], sink)
    log_path = tmp_path / "logs" / "high_throughput-0.log"
    await sup.start()
    try:
        await wait_log(log_path, lambda text: bool(pids_in_log(log_path, "child")))
        leader, child = pids_in_log(log_path, "leader")[0], pids_in_log(log_path, "child")[0]
        os.kill(leader, signal.SIGKILL)
        await until(lambda: len(pids_in_log(log_path, "child")) == 2, timeout=30)
        assert not alive(child)  # a stage process must not outlive its worker
        assert sink.of("high_throughput-0") == ["add", "restarting"]
        assert sup.workers[0].last_exit_code == -signal.SIGKILL
        new_leader, new_child = pids_in_log(log_path, "leader")[1], pids_in_log(log_path, "child")[1]
    finally:
        await sup.stop()
    assert not alive(new_leader) and not alive(new_child)


async def test_never_answering_worker_fails_after_the_start_timeout(tmp_path: Path) -> None:
    sink = RecordingSink()
    sup = supervisor(tmp_path, ["sleep", "1000"], sink, start_timeout_s=1.0, stop_timeout_s=1.0)
    await sup.start()
    try:
        pid = sup.workers[0].pid
        assert pid is not None
        await until(lambda: sup.workers[0].state is RunState.FAILED, timeout=30)
        assert not alive(pid)
        assert sink.of("high_throughput-0") == ["add", "failed"]
        assert "start timeout" in sink.reason("high_throughput-0")
    finally:
        await sup.stop()


async def test_immediately_exiting_command_fails_after_the_crash_loop_limit(tmp_path: Path) -> None:
    sink = RecordingSink()
    crash = [sys.executable, "-c", "import sys; print('boom', flush=True); sys.exit(3)"]
    sup = supervisor(tmp_path, crash, sink)
    await sup.start()
    try:
        await until(lambda: sup.workers[0].state is RunState.FAILED, timeout=60)
    finally:
        await sup.stop()
    assert sink.of("high_throughput-0") == ["add", "restarting", "restarting", "failed", "remove"]
    assert "crash loop" in sink.reason("high_throughput-0")
    log_text = (tmp_path / "logs" / "high_throughput-0.log").read_text()
    assert log_text.splitlines().count("boom") == 3 and log_text.count("exited with code 3") == 3


async def test_missing_executable_fails_at_once(tmp_path: Path) -> None:
    sink = RecordingSink()
    sup = supervisor(tmp_path, ["/nonexistent/vllm-omni", "serve"], sink)
    await sup.start()
    try:
        assert sup.workers[0].state is RunState.FAILED
        assert "cannot start" in sink.reason("high_throughput-0")
    finally:
        await sup.stop()


async def test_logs_rotate_by_size(tmp_path: Path) -> None:
    chatty = [sys.executable, "-c", "import sys, time\nfor i in range(400): print('x' * 99, flush=True)\ntime.sleep(1000)"]
    sup = supervisor(tmp_path, chatty, RecordingSink(), log_max_bytes=10_000, log_backups=2)
    await sup.start()
    try:
        log_dir = tmp_path / "logs"
        await until(lambda: (log_dir / "high_throughput-0.log.2").exists(), timeout=30)
    finally:
        await sup.stop()
    names = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert names == ["high_throughput-0.log", "high_throughput-0.log.1", "high_throughput-0.log.2"]
    assert all(p.stat().st_size <= 10_000 for p in (tmp_path / "logs").iterdir())
