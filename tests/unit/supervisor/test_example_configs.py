"""The shipped gateway configs load, document the defaults, and supervise as described."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import VLLM_OMNI_COMMAND, GatewayConfig, load_config
from gateway.supervisor.setup import build_supervisors, check_supervised_profiles
from gateway.types import PoolName

from .fakes import RecordingSink

PROFILES = Path(__file__).resolve().parents[3] / "profiles"
EXAMPLE = PROFILES / "gateway.example.yaml"
TWO_GPU = PROFILES / "gateway.two-gpu.yaml"
EXAMPLE_VALUES = {("pools", "low_latency", "workers"), ("pools", "high_throughput", "workers")}


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("HIGGS_GATEWAY_"):
            monkeypatch.delenv(name)


def test_example_loads_with_static_workers() -> None:
    config = load_config(EXAMPLE)
    assert config.pools.low_latency.workers and config.pools.high_throughput.workers
    assert config.pools.low_latency.launch is None and config.pools.high_throughput.launch is None


def test_example_has_every_section() -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    assert set(document) == set(GatewayConfig.model_fields)


def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict) and node and path[-1:] not in (("queue_size",), ("max_wait_s",)):
        return [leaf for key, value in node.items() for leaf in _leaves(value, (*path, str(key)))]
    return [(path, node)]


def test_example_values_are_the_defaults() -> None:
    defaults = GatewayConfig().model_dump(mode="json")
    for path, value in _leaves(yaml.safe_load(EXAMPLE.read_text())):
        if path in EXAMPLE_VALUES:
            continue
        expected: Any = defaults
        for key in path:
            expected = expected[key]
        if path == ("data_dir",):
            assert Path(value) == Path(expected)
        else:
            assert value == expected, ".".join(path)


def test_two_gpu_config_supervises_one_worker_per_gpu(tmp_path: Path) -> None:
    config = load_config(TWO_GPU, {"data_dir": str(tmp_path)})
    ll, ht = config.pools.low_latency.launch, config.pools.high_throughput.launch
    assert ll is not None and ht is not None
    assert (ll.gpus, ht.gpus) == (["0"], ["1"])
    assert ll.command == VLLM_OMNI_COMMAND and ht.command == VLLM_OMNI_COMMAND
    assert check_supervised_profiles(config) == []
    supervisors = build_supervisors(config, RecordingSink())
    assert [s.pool for s in supervisors] == [PoolName.LOW_LATENCY, PoolName.HIGH_THROUGHPUT]
    assert all(s.profile_path.is_absolute() and s.profile_path.exists() for s in supervisors)
    assert supervisors[0].log_dir == tmp_path / "logs"
