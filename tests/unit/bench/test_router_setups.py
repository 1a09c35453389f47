"""The comparison's other routers (vLLM's, nginx least_conn): their command lines, and a
setup whose tool is missing skipped with the reason instead of failing the run."""

from __future__ import annotations

import pytest

from gateway.bench import compare, routers
from gateway.bench.compare import COMPARED, NGINX, ROUTER_SETUPS, SETUPS, VLLM_ROUTER, chosen_setups, missing_tool
from gateway.bench.fleet import HT_PROFILE, LL_PROFILE
from gateway.bench.routers import nginx_command, vllm_router_command


def _setup(name: str) -> compare.Setup:
    return next(s for s in COMPARED if s.name == name)


def test_router_setups_run_the_same_fleets_and_stay_out_of_the_simulators_list() -> None:
    assert {s.name for s in ROUTER_SETUPS} == {"vllm-router-p2", "vllm-router-rr", "nginx-least-conn",
                                               "ht+ht-vllm-router"}  # fmt: skip
    for name in ("vllm-router-p2", "vllm-router-rr", "nginx-least-conn"):
        assert _setup(name).profiles == (LL_PROFILE, HT_PROFILE)  # adaptive's fleet
    assert _setup("ht+ht-vllm-router").profiles == (HT_PROFILE, HT_PROFILE)
    assert all(s.router == "gateway" for s in SETUPS)  # the simulator models the gateway only
    assert len({s.name for s in COMPARED}) == len(COMPARED)


def test_the_default_run_measures_every_setup_with_adaptive() -> None:
    every = chosen_setups(",".join(s.name for s in COMPARED))
    assert [s.name for s in every] == [s.name for s in COMPARED]
    assert {s.name for s in chosen_setups("vllm-router-rr")} == {"vllm-router-rr"}


def test_vllm_router_command_names_the_workers_and_the_policy(monkeypatch) -> None:
    monkeypatch.setattr(routers, "vllm_router_binary", lambda: "/venv/bin/vllm-router")
    command = vllm_router_command(7000, ["http://127.0.0.1:1", "http://127.0.0.1:2"], "power_of_two", 7001)
    assert command[0] == "/venv/bin/vllm-router"
    workers = command.index("--worker-urls")
    assert command[workers + 1 : workers + 3] == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert command[command.index("--policy") + 1] == "power_of_two"
    assert command[command.index("--port") + 1] == "7000"
    assert command[command.index("--prometheus-port") + 1] == "7001"
    with pytest.raises(ValueError, match="cache_aware"):
        vllm_router_command(7000, ["http://127.0.0.1:1"], "cache_aware", 7001)


def test_vllm_router_missing_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setattr(routers, "vllm_router_binary", lambda: None)
    with pytest.raises(RuntimeError, match=r"\.\[bench\]"):
        vllm_router_command(7000, ["http://127.0.0.1:1"], "round_robin", 7001)


def test_nginx_least_conn_balances_by_open_connections(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("gateway.bench.routers.nginx_binary", lambda: "/usr/sbin/nginx")
    nginx_command(tmp_path, 1, ["127.0.0.1:2", "127.0.0.1:3"], balance="least_conn")
    conf = (tmp_path / "nginx.conf").read_text()
    upstream = conf[conf.index("upstream worker") : conf.index("keepalive")]
    assert "least_conn;" in upstream
    assert "server 127.0.0.1:2;" in upstream and "server 127.0.0.1:3;" in upstream


@pytest.mark.parametrize(
    ("name", "absent", "says"),
    [
        ("vllm-router-p2", "vllm", "vllm-router is not installed"),
        ("ht+ht-vllm-router", "vllm", "vllm-router is not installed"),
        ("nginx-least-conn", "nginx", "nginx is not installed"),
        ("adaptive-2r", "nginx", "nginx is not installed"),
        ("adaptive-3r", "redis", "redis-server is not installed"),
    ],
)
def test_a_setup_whose_tool_is_missing_is_skipped_with_the_reason(monkeypatch, name: str, absent: str,
                                                                  says: str) -> None:  # fmt: skip
    monkeypatch.setattr(compare, "vllm_router_binary", lambda: None if absent == "vllm" else "/bin/vllm-router")
    monkeypatch.setattr(compare, "nginx_binary", lambda: None if absent == "nginx" else "/usr/sbin/nginx")
    monkeypatch.setattr(compare.shutil, "which", lambda tool: None if absent == "redis" else f"/usr/bin/{tool}")
    assert says in (missing_tool(_setup(name)) or "")
    assert missing_tool(_setup("adaptive")) is None  # one gateway needs none of them


def test_router_kinds_are_the_ones_start_setup_knows() -> None:
    assert {s.router for s in ROUTER_SETUPS} == {VLLM_ROUTER, NGINX}


def test_stored_results_are_read_by_exact_setup_name(tmp_path) -> None:
    import json

    from gateway.bench import report

    for label in ("adaptive", "adaptive-2r", "ht+ht", "ht+ht-vllm-router"):
        document = {"schema": report.SCHEMA, "label": label, "mode": "sweep", "phases": []}
        (tmp_path / f"{label}-sweep.json").write_text(json.dumps(document))
    assert [d["label"] for d in compare.stored(tmp_path, "adaptive")] == ["adaptive"]
    assert [d["label"] for d in compare.stored(tmp_path, "ht+ht")] == ["ht+ht"]
