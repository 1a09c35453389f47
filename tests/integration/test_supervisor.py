"""Supervised pools end to end: the emulator launched through vllm-omni's own flags."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest

from gateway.config import LaunchConfig, WarmupConfig
from gateway.worker.profile import resolve_profile_path
from gateway.pools.warmup import default_batch_sizes, warm_up
from gateway.supervisor.pool import PoolSupervisor
from gateway.supervisor.worker import RunState
from gateway.types import PoolName

from .supervisor_support import RecordingSink, alive, until

pytestmark = pytest.mark.timeout(180)

LL_PROFILE = resolve_profile_path("higgs_multimodal_qwen3_low_latency.yaml").resolve()
HT_PROFILE = resolve_profile_path("higgs_multimodal_qwen3_high_throughput.yaml").resolve()
SERVED = "higgs-test"


def emulator_command(tmp_path: Path, time_scale: float, *extra: str) -> list[str]:
    """Exactly vllm-omni serve's flags, plus the emulator's own."""
    return [
        sys.executable, "-m", "gateway", "emulate", "{model}", "--omni", "--trust-remote-code",
        "--deploy-config", "{profile}", "--host", "{host}", "--port", "{port}",
        "--served-model-name", "{served_model_name}", "--log-stats", "--enable-server-load-tracking",
        "--time-scale", str(time_scale), "--voices-dir", str(tmp_path / "voices-{worker_id}"), *extra,
    ]  # fmt: skip


def pool(
    tmp_path: Path, name: PoolName, profile: Path, sink: RecordingSink, command: list[str], **launch: object
) -> PoolSupervisor:
    settings: dict[str, object] = {
        "gpus": ["0"],
        "command": command,
        "start_timeout_s": 60.0,
        "stop_timeout_s": 10.0,
        "restart_backoff_initial_s": 0.1,
        "restart_backoff_max_s": 0.5,
        **launch,
    }
    return PoolSupervisor(
        name, LaunchConfig(**settings), profile, sink, tmp_path, SERVED, ready_poll_s=0.1  # type: ignore[arg-type]
    )


def captures(metrics_text: str) -> dict[int, float]:
    found = re.findall(r'^higgs_emulator_graph_captures_total\{batch_size="(\d+)"\} ([0-9.e+]+)$', metrics_text, re.M)
    return {int(size): float(value) for size, value in found}


async def test_pools_start_answer_warm_up_restart_and_stop_clean(tmp_path: Path) -> None:
    sink = RecordingSink()
    ll = pool(tmp_path, PoolName.LOW_LATENCY, LL_PROFILE, sink, emulator_command(tmp_path, 0.05))
    # Real time for the high-throughput worker: each warm-up burst must really run as a batch.
    ht = pool(tmp_path, PoolName.HIGH_THROUGHPUT, HT_PROFILE, sink, emulator_command(tmp_path, 1.0), gpus=["1"])
    pids: list[int] = []
    try:
        await ll.start()
        await ht.start()
        assert [c[:2] for c in sink.calls] == [("add", "low_latency-0"), ("add", "high_throughput-0")]
        await until(lambda: all(w.state is RunState.RUNNING for w in [*ll.workers, *ht.workers]), timeout=90)
        ll_url, ht_url = ll.workers[0].url, ht.workers[0].url
        pids += [w.pid for w in [*ll.workers, *ht.workers] if w.pid]

        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            models = (await client.get(f"{ll_url}/v1/models")).json()
            assert [m["id"] for m in models["data"]] == [SERVED]

            sizes = default_batch_sizes(PoolName.HIGH_THROUGHPUT, 64)
            report = await warm_up(client, ht_url, SERVED, WarmupConfig(max_new_tokens=50), sizes)
            assert report.ok, report.summary()
            seen = captures((await client.get(f"{ht_url}/metrics")).text)
            assert all(seen.get(size, 0) >= 1 for size in sizes), seen

            # A worker killed with SIGKILL comes back at the same URL and answers again.
            old_pid = ll.workers[0].pid
            assert old_pid is not None
            os.kill(old_pid, signal.SIGKILL)
            await until(lambda: sink.of("low_latency-0")[-1:] == ["restarting"], timeout=30)
            await until(lambda: ll.workers[0].state is RunState.RUNNING, timeout=90)
            assert ll.workers[0].pid != old_pid and ll.workers[0].url == ll_url
            pids.append(ll.workers[0].pid or 0)
            assert (await client.get(f"{ll_url}/health")).status_code == 200
            speech = await client.post(
                f"{ll_url}/v1/audio/speech",
                json={"model": SERVED, "input": "Back again.", "response_format": "pcm", "stream_format": "audio",
                      "max_new_tokens": 20},  # fmt: skip
            )
            assert speech.status_code == 200 and speech.content
    finally:
        await ll.stop()
        await ht.stop()
    assert pids and not any(alive(pid) for pid in pids)
    assert sink.of("low_latency-0") == ["add", "restarting", "remove"]
    assert sink.of("high_throughput-0") == ["add", "remove"]
    assert "exited with code -9" in (tmp_path / "logs" / "low_latency-0.log").read_text()


async def test_worker_that_never_answers_fails_after_the_start_timeout(tmp_path: Path) -> None:
    sink = RecordingSink()
    command = emulator_command(tmp_path, 0.05, "--startup-delay", "1000")
    sup = pool(tmp_path, PoolName.LOW_LATENCY, LL_PROFILE, sink, command, start_timeout_s=3.0, stop_timeout_s=5.0)
    try:
        await sup.start()
        pid = sup.workers[0].pid
        assert pid is not None
        await until(lambda: sup.workers[0].state is RunState.FAILED, timeout=60)
        assert not alive(pid)
        assert sink.of("low_latency-0") == ["add", "failed"]
        assert "start timeout" in sink.reason("low_latency-0")
    finally:
        await sup.stop()


async def test_worker_that_exits_at_once_fails_after_the_crash_loop_limit(tmp_path: Path) -> None:
    sink = RecordingSink()
    # vllm-omni 0.30.0 rejects the removed flag: the process exits during argument parsing.
    command = [*emulator_command(tmp_path, 0.05), "--stage-configs-path", "x.yaml"]
    sup = pool(tmp_path, PoolName.LOW_LATENCY, LL_PROFILE, sink, command, crash_loop_restarts=2)
    try:
        await sup.start()
        await until(lambda: sup.workers[0].state is RunState.FAILED, timeout=90)
        assert sink.of("low_latency-0") == ["add", "restarting", "failed"]
        assert "crash loop" in sink.reason("low_latency-0")
        assert sup.workers[0].last_exit_code not in (None, 0)
    finally:
        await sup.stop()


async def test_a_worker_whose_engine_died_exits_and_is_restarted_with_its_voices(tmp_path: Path) -> None:
    # The released worker stops serving after engine death (terminate_if_errored) and its
    # process exits cleanly: the supervisor restarts it like any other exit, and the new
    # process restores the uploaded voices from its speaker directory.
    from tests.support.clip_server import tone_wav

    sink = RecordingSink()
    ll = pool(tmp_path, PoolName.LOW_LATENCY, LL_PROFILE, sink, emulator_command(tmp_path, 0.02))
    try:
        await ll.start()
        await until(lambda: ll.workers[0].state is RunState.RUNNING, timeout=90)
        url, old_pid = ll.workers[0].url, ll.workers[0].pid
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            upload = await client.post(
                f"{url}/v1/audio/voices", data={"name": "Anna", "consent": "ok"},
                files={"audio_sample": ("a.wav", tone_wav(2.0), "audio/wav")},
            )  # fmt: skip
            assert upload.status_code == 200
            await client.post(f"{url}/emulator/faults", json={"engine_dead": True})
            dead = await client.post(f"{url}/v1/audio/speech", json={"model": SERVED, "input": "Hello."})
            assert dead.status_code == 500 and dead.json()["error"]["error_stage_id"] is None
            await until(lambda: sink.of("low_latency-0")[-1:] == ["restarting"], timeout=30)
            await until(lambda: ll.workers[0].state is RunState.RUNNING and ll.workers[0].pid != old_pid, timeout=90)
            voices = (await client.get(f"{url}/v1/audio/voices")).json()["voices"]
            assert "anna" in voices
            speech = await client.post(f"{url}/v1/audio/speech", json={"model": SERVED, "input": "Back.", "voice": "anna"})
            assert speech.status_code == 200
    finally:
        await ll.stop()
    assert "exited with code 0" in (tmp_path / "logs" / "low_latency-0.log").read_text()
