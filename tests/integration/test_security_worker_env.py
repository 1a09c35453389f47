"""Security, supervised workers' environment: a worker runs --trust-remote-code and parses
untrusted audio, so it gets only what it needs from the gateway's environment (an
allow-list) plus ``launch.env``, never the gateway's own settings and secrets.

A real supervised emulator worker, its environment read from ``/proc/<pid>/environ``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.config import LaunchConfig
from gateway.supervisor.worker import RunState
from gateway.types import PoolName

from .supervisor_support import RecordingSink, until
from .test_supervisor import LL_PROFILE, emulator_command, pool

pytestmark = pytest.mark.timeout(120)

GATEWAY_SECRETS = {
    "HIGGS_GATEWAY_ADMIN_TOKEN": "admin-token-that-must-stay-home-0123456789",
    "HIGGS_GATEWAY_STATE__REDIS_PASSWORD": "redis-password-that-must-stay-home",
    "AWS_SECRET_ACCESS_KEY": "an-unrelated-secret-of-the-gateway-host",
}


def process_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode().split("\0") if "=" in entry)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
async def test_a_supervised_worker_holds_none_of_the_gateways_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**GATEWAY_SECRETS, "HF_HOME": str(tmp_path / "hf"), "LC_ALL": "C.UTF-8"}.items():
        monkeypatch.setenv(name, value)
    sink = RecordingSink()
    workers = pool(
        tmp_path, PoolName.LOW_LATENCY, LL_PROFILE, sink, emulator_command(tmp_path, 0.05),
        env={"HF_TOKEN": "hf-token-given-on-purpose", "MY_WORKER_SETTING": "1"},
    )  # fmt: skip
    await workers.start()
    try:
        await until(lambda: workers.workers[0].state is RunState.RUNNING, timeout=90)
        pid = workers.workers[0].pid
        assert pid is not None
        env = process_env(pid)
    finally:
        await workers.stop()
    leaked = sorted(name for name in env if name.startswith("HIGGS_GATEWAY_") or name in GATEWAY_SECRETS)
    assert leaked == []
    assert not any(value in GATEWAY_SECRETS.values() for value in env.values())
    # What it needs still reaches it: the allow-list, launch.env, the supervisor's own settings.
    assert env["PATH"] == os.environ["PATH"] and env["HF_HOME"] == str(tmp_path / "hf") and env["LC_ALL"] == "C.UTF-8"
    assert env["HF_TOKEN"] == "hf-token-given-on-purpose" and env["MY_WORKER_SETTING"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["PYTHONUNBUFFERED"] == "1"


def test_launch_env_cannot_hand_a_worker_the_gateways_settings() -> None:
    with pytest.raises(ValueError, match="HIGGS_GATEWAY_ADMIN_TOKEN"):
        LaunchConfig(gpus=["0"], env={"HIGGS_GATEWAY_ADMIN_TOKEN": "x"})
