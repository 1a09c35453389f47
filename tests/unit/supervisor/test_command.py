"""Per-worker command line, environment, address and log path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.config import VLLM_OMNI_COMMAND, LaunchConfig
from gateway.supervisor.command import build_specs, render_command
from gateway.types import PoolName

PROFILE = Path("/profiles/ll.yaml")


def specs(tmp_path: Path, **kw: object):
    launch = LaunchConfig(**{"gpus": ["0", "1"], "port_start": 9100, **kw})  # type: ignore[arg-type]
    return build_specs(PoolName.LOW_LATENCY, launch, PROFILE, "higgs", tmp_path / "logs", base_env={"PATH": "/bin"})


def test_default_command_is_the_real_vllm_omni_launch(tmp_path: Path) -> None:
    first, second = specs(tmp_path)
    assert first.argv[:3] == ("vllm-omni", "serve", "bosonai/higgs-audio-v3-tts-4b")
    args = list(first.argv)
    for flag, value in [("--deploy-config", str(PROFILE)), ("--host", "127.0.0.1"), ("--port", "9100"),
                        ("--served-model-name", "higgs")]:  # fmt: skip
        assert args[args.index(flag) + 1] == value
    assert {"--omni", "--trust-remote-code", "--log-stats", "--enable-server-load-tracking"} <= set(args)
    assert "--stage-overrides" not in args
    assert second.argv[second.argv.index("--port") + 1] == "9101"
    assert len(first.argv) == len(VLLM_OMNI_COMMAND)


def test_ids_urls_and_logs_per_gpu(tmp_path: Path) -> None:
    first, second = specs(tmp_path)
    assert [first.worker_id, second.worker_id] == ["low_latency-0", "low_latency-1"]
    assert [first.url, second.url] == ["http://127.0.0.1:9100", "http://127.0.0.1:9101"]
    assert first.log_path == tmp_path / "logs" / "low_latency-0.log"


def test_environment_pins_one_gpu_and_disables_deep_gemm(tmp_path: Path) -> None:
    first, second = specs(tmp_path, env={"HF_HOME": "/cache", "CUDA_VISIBLE_DEVICES": "7"})
    assert first.env["CUDA_VISIBLE_DEVICES"] == "0" and second.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert first.env["VLLM_USE_DEEP_GEMM"] == "0" and first.env["VLLM_MOE_USE_DEEP_GEMM"] == "0"
    assert first.env["HF_HOME"] == "/cache" and first.env["PATH"] == "/bin"


def test_stage_overrides_are_passed_as_json(tmp_path: Path) -> None:
    overrides = {"0": {"gpu_memory_utilization": 0.3}, "1": {"gpu_memory_utilization": 0.2}}
    (first, _) = specs(tmp_path, stage_overrides=overrides)
    assert first.argv[-2] == "--stage-overrides"
    assert json.loads(first.argv[-1]) == overrides


def test_served_model_name_from_launch_wins(tmp_path: Path) -> None:
    (first, _) = specs(tmp_path, served_model_name="mine")
    assert first.argv[first.argv.index("--served-model-name") + 1] == "mine"


def test_port_zero_picks_distinct_free_ports(tmp_path: Path) -> None:
    first, second = specs(tmp_path, port_start=0)
    assert first.port > 0 and second.port > 0 and first.port != second.port


def test_template_placeholders(tmp_path: Path) -> None:
    argv = render_command(
        ["run", "{model}", "--id={worker_id}", "--gpu", "{gpu}", '{"literal": 1}'],
        {"model": "m", "worker_id": "w", "gpu": "3"},
    )
    assert argv == ["run", "m", "--id=w", "--gpu", "3", '{"literal": 1}']
    with pytest.raises(ValueError, match="modle"):
        specs(tmp_path, command=["run", "{modle}"])


def test_ports_past_65535_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="65535"):
        specs(tmp_path, port_start=65535)


def test_each_worker_gets_its_own_speaker_dir(tmp_path: Path) -> None:
    # vllm-omni's default speaker dir is shared by every worker on a host.
    launch = LaunchConfig(gpus=["0", "1"], port_start=9100)
    first, second = build_specs(
        PoolName.LOW_LATENCY, launch, PROFILE, "higgs", tmp_path / "logs", base_env={}, speakers_root=tmp_path / "speakers"
    )
    assert first.env["SPEAKER_SAMPLES_DIR"] == str(tmp_path / "speakers" / "low_latency-0")
    assert second.env["SPEAKER_SAMPLES_DIR"] == str(tmp_path / "speakers" / "low_latency-1")


def test_load_tracking_is_added_to_a_command_that_forgot_it(tmp_path: Path) -> None:
    command = [c for c in VLLM_OMNI_COMMAND if c != "--enable-server-load-tracking"]
    (spec, _) = specs(tmp_path, command=command)
    assert spec.argv.count("--enable-server-load-tracking") == 1


def test_a_command_that_is_not_a_vllm_omni_worker_is_left_alone(tmp_path: Path) -> None:
    (spec, _) = specs(tmp_path, command=["sleep", "1000"])
    assert spec.argv == ("sleep", "1000")


def test_only_the_allow_listed_environment_is_inherited(tmp_path: Path) -> None:
    base = {
        "PATH": "/bin", "HOME": "/home/gw", "LANG": "C.UTF-8", "LC_ALL": "C", "HF_HOME": "/cache",
        "PYTHONPATH": "/src", "NVIDIA_VISIBLE_DEVICES": "all", "TMPDIR": "/scratch",
        "HIGGS_GATEWAY_ADMIN_TOKEN": "secret", "HIGGS_GATEWAY_STATE__REDIS_URL": "redis://:pw@r/0",
        "AWS_SECRET_ACCESS_KEY": "secret", "DATABASE_URL": "postgres://u:pw@db/x",
    }  # fmt: skip
    launch = LaunchConfig(gpus=["0"], port_start=9100, env={"EXTRA": "1"})
    (spec,) = build_specs(PoolName.LOW_LATENCY, launch, PROFILE, "higgs", tmp_path / "logs", base_env=base)
    inherited = {"PATH", "HOME", "LANG", "LC_ALL", "HF_HOME", "PYTHONPATH", "NVIDIA_VISIBLE_DEVICES", "TMPDIR"}
    assert {name: spec.env[name] for name in inherited} == {name: base[name] for name in inherited}
    assert not {"HIGGS_GATEWAY_ADMIN_TOKEN", "HIGGS_GATEWAY_STATE__REDIS_URL", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL"} & set(spec.env)
    assert spec.env["EXTRA"] == "1"
