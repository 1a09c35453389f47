"""``server.processes``: off by default; more than one only as replicas on the Redis state
backend, never with supervised pools; ``--processes`` overrides the file."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from gateway.config import GatewayConfig
from gateway.serve import main as serve_main
from gateway.serve_processes import listening_socket

REDIS = {"backend": "redis", "redis_url": "redis://127.0.0.1:6379/0"}
POOLS = {"low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": ["http://127.0.0.1:9"]}}


def test_one_process_by_default() -> None:
    assert GatewayConfig().server.processes == 1


def test_several_processes_share_the_fleet_through_redis() -> None:
    config = GatewayConfig(server={"processes": 3}, state=REDIS, pools=POOLS)
    assert config.server.processes == 3


@pytest.mark.parametrize("state", [{}, {**REDIS, "share_inflight": False}])
def test_several_processes_without_the_shared_view_are_refused(state: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match=r"server.processes: 2 needs state.backend: redis"):
        GatewayConfig(server={"processes": 2}, state=state)


def test_several_processes_never_launch_workers() -> None:
    pools = {"low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "launch": {"gpus": ["0"]}}}
    with pytest.raises(ValidationError, match=r"supervised pools \(low_latency\)"):
        GatewayConfig(server={"processes": 2}, state=REDIS, pools=pools)


def _write(tmp_path: Path, document: dict[str, object]) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_the_config_check_refuses_processes_on_the_local_backend(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, {"pools": POOLS, "data_dir": str(tmp_path / "data")})
    assert serve_main(["--config", path, "--processes", "2", "--check"]) == 1
    assert "server.processes: 2 needs state.backend: redis" in capsys.readouterr().err


def test_the_processes_flag_overrides_the_file(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, {"pools": POOLS, "state": REDIS, "server": {"processes": 4}})
    assert serve_main(["--config", path, "--processes", "2", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["server"]["processes"] == 2


def test_the_shared_socket_listens_and_is_inherited() -> None:
    sock = listening_socket("127.0.0.1", 0)
    try:
        assert sock.get_inheritable()
        with socket.create_connection(sock.getsockname()[:2], timeout=2):
            pass  # the kernel queues it until a process accepts
    finally:
        sock.close()
