"""Configs and probes the benchmark generates for the processes it starts."""

from __future__ import annotations

import os
import time

from gateway.bench.fleet import HT_PROFILE, LL_PROFILE, cpu_seconds, emulator_command, tree_cpu_seconds
from gateway.bench.gateway_config import gateway_document
from gateway.bench.routers import NGINX_CONF, nginx_command
from gateway.config import GatewayConfig


def test_gateway_document_is_a_valid_config_even_with_an_empty_pool(tmp_path) -> None:
    document = gateway_document(8123, tmp_path, ["http://127.0.0.1:1", "http://127.0.0.1:2"], [],
                                "low_latency_only", time_scale=0.2, ll_slots=16)  # fmt: skip
    config = GatewayConfig(**document)
    assert config.pools.high_throughput.workers == []
    assert config.pools.low_latency.slots_per_worker == 16
    assert config.routing.policy == "low_latency_only"


def test_gateway_time_knobs_follow_the_time_scale(tmp_path) -> None:
    normal = GatewayConfig(**gateway_document(1, tmp_path, ["http://a:1"], ["http://b:1"], "adaptive"))
    fast = GatewayConfig(**gateway_document(1, tmp_path, ["http://a:1"], ["http://b:1"], "adaptive", time_scale=0.1))
    assert fast.routing.thresholds.latency_queue_budget_ms == normal.routing.thresholds.latency_queue_budget_ms * 0.1
    assert fast.admission.max_wait_s["latency"] == normal.admission.max_wait_s["latency"] * 0.1


def test_emulator_command_takes_vllm_omni_flags() -> None:
    args = emulator_command(9000, HT_PROFILE, 0.2)
    assert args[3:5] == ["emulate", "bosonai/higgs-audio-v3-tts-4b"]
    assert args[args.index("--deploy-config") + 1] == HT_PROFILE != LL_PROFILE
    assert args[args.index("--time-scale") + 1] == "0.2"
    assert "--synthetic-audio" in args  # benchmark timings never pay for speech synthesis


def test_nginx_config_streams_without_buffering_over_keepalive() -> None:
    conf = NGINX_CONF.format(prefix="/p", port=1, servers="        server 127.0.0.1:2;")
    assert "proxy_buffering off;" in conf and "keepalive 256;" in conf
    assert 'proxy_set_header Connection "";' in conf and "proxy_http_version 1.1;" in conf


def test_nginx_balances_round_robin_over_every_replica(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("gateway.bench.routers.nginx_binary", lambda: "/usr/sbin/nginx")
    command = nginx_command(tmp_path, 1, ["127.0.0.1:2", "127.0.0.1:3"])
    conf = (tmp_path / "nginx.conf").read_text()
    assert command[-1] == str(tmp_path / "nginx.conf")
    assert "server 127.0.0.1:2;" in conf and "server 127.0.0.1:3;" in conf
    assert "least_conn" not in conf and "hash" not in conf  # nginx's default: round robin


def test_cpu_seconds_reads_this_process() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) > before
    own = cpu_seconds(os.getpid())  # read first: CPU time only grows, so the tree read after is >=
    assert tree_cpu_seconds(os.getpid()) >= own
