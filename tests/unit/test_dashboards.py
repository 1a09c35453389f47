"""Dashboards, alert rules and the Prometheus/Grafana config examples in dashboards/."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from gateway.types.labels import TTFP_BUCKETS
from tests.support.prometheus import (
    DASHBOARD_FILES,
    DASHBOARDS,
    VARIABLE_VALUES,
    expand,
    load_dashboard,
    panel_queries,
    promtool,
)
from tests.unit.test_metrics import EXPECTED

GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range"}
WORKER_SERIES = (
    "vllm_omni:num_requests_running",
    "vllm_omni:num_requests_waiting",
    "vllm_omni:audio_ttfp_s_bucket",
    "vllm_omni:audio_rtf_bucket",
    "vllm_omni:requests_success_total",  # finished_reason="abort" is the failure count
)


def generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk")
    spec = importlib.util.spec_from_file_location("dashboards_generate", DASHBOARDS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_committed_json_is_the_generators_output() -> None:
    """The committed dashboards and alert rules are the generator's output for the default config."""
    rendered = generator().render_all()
    assert set(rendered) == {*DASHBOARD_FILES, "alerts.yml"}
    for name, text in rendered.items():
        assert (DASHBOARDS / name).read_text() == text, f"{name} is stale: run python dashboards/generate.py"


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_dashboard_structure(name: str) -> None:
    dashboard = load_dashboard(name)
    assert re.fullmatch(r"[a-z0-9-]{1,40}", dashboard["uid"])
    assert dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"pool", "instance"} <= set(variables)
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"]["uid"] == "${datasource}"
            assert var["allValue"] == ".*"  # so label values unseen at load time still match

    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 8
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["title"] and panel.get("description"), panel
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        assert 0 <= panel["gridPos"]["x"] and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            for var in re.findall(r"\$\{?(\w+)", target["expr"]):
                assert var in variables or var in GRAFANA_BUILTINS, (panel["title"], var)


def test_overview_shows_every_gateway_series() -> None:
    exprs = " ".join(expr for _, expr in panel_queries(load_dashboard("gateway-overview.json")))
    for name in EXPECTED:
        assert name in exprs, name
    assert 'reason=~"spill_.*"' in exprs  # the spill-over rate
    assert "higgs_gateway_routing_threshold" in exprs and "vector($ttfp_target)" in exprs  # drawn lines


def test_workers_dashboard_uses_the_workers_own_series() -> None:
    exprs = " ".join(expr for _, expr in panel_queries(load_dashboard("workers.json")))
    for series in WORKER_SERIES:
        assert series in exprs, series
    assert "higgs_gateway_" not in exprs


def test_ttfp_target_options_are_bucket_bounds() -> None:
    variables = {v["name"]: v for v in load_dashboard("gateway-overview.json")["templating"]["list"]}
    bounds = {repr(b) for b in TTFP_BUCKETS}  # prometheus_client writes le="0.5", le="1.0"
    options = [o["value"] for o in variables["ttfp_target"]["options"]]
    assert options and set(options) <= bounds
    assert VARIABLE_VALUES["ttfp_target"] in options


def test_every_panel_expression_parses(tmp_path: Path) -> None:
    # promtool has no "parse this expression": wrap each one as a recording rule instead.
    rules = [
        {"record": f"dashboard_check:{i}", "expr": expand(expr)}
        for name in DASHBOARD_FILES
        for i, (_, expr) in enumerate(panel_queries(load_dashboard(name)), start=len(name) * 1000)
    ]
    path = tmp_path / "exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    done = promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_are_valid_and_their_unit_tests_pass() -> None:
    done = promtool("check", "rules", "alerts.yml", cwd=DASHBOARDS)
    assert done.returncode == 0, done.stdout + done.stderr
    done = promtool("test", "rules", "alerts_test.yml", cwd=DASHBOARDS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_targets_come_from_the_gateway_config(tmp_path: Path) -> None:
    """``--config``: the alert rules and the dashboard use the config's targets, not literals."""
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"slo": {"latency_ttfp_target_s": 0.3, "latency_ttfp_objective": 0.995,
                                              "degraded_alert_after_s": 120}}))  # fmt: skip
    out = tmp_path / "out"
    assert generator().main(["--config", str(config), "--out", str(out)]) == 0
    alerts = (out / "alerts.yml").read_text()
    assert 'le="0.3"' in alerts and 'le="0.5"' not in alerts
    assert "(14.4 * 0.005)" in alerts and "for: 2m" in alerts and "gateway.yaml" in alerts
    assert promtool("check", "rules", "alerts.yml", cwd=out).returncode == 0
    overview = (out / "gateway-overview.json").read_text()
    variables = {v["name"]: v for v in yaml.safe_load(overview)["templating"]["list"]}
    assert variables["ttfp_target"]["current"]["value"] == "0.3"
    assert "vector(0.995)" in overview
    # The committed files are the defaults' output (test_committed_json_is_the_generators_output).
    assert 'le="0.5"' in (DASHBOARDS / "alerts.yml").read_text()


def test_alerts_cover_the_agreed_conditions() -> None:
    groups = yaml.safe_load((DASHBOARDS / "alerts.yml").read_text())["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    assert {"HiggsLatencyTTFPBurnFast", "HiggsLatencyTTFPBurnSlow", "HiggsNoRoutableWorker",
            "HiggsRejectionRateHigh", "HiggsWorkerFlapping", "HiggsWorkerReportStale", "HiggsStateBackendDown",
            "HiggsGatewayDegraded", "HiggsWorkerRestartsFrequent"} <= set(alerts)  # fmt: skip
    for rule in alerts.values():
        assert rule["labels"]["severity"] in {"page", "ticket", "warning"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    recorded = " ".join(r["expr"] for g in groups for r in g["rules"] if "record" in r)
    # The SLO bound must be a real bucket bound or the ratio is silently empty.
    for bound in re.findall(r'le="([^"]+)"', recorded):
        assert float(bound) in TTFP_BUCKETS and bound == repr(float(bound))


def test_prometheus_config_example_is_valid() -> None:
    done = promtool("check", "config", "prometheus.yml", cwd=DASHBOARDS)
    assert done.returncode == 0, done.stdout + done.stderr
    config = yaml.safe_load((DASHBOARDS / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert "higgs-gateway" in jobs  # HiggsGatewayDown reads up{job="higgs-gateway"}
    pools = {group["labels"]["pool"] for group in jobs["higgs-workers"]["static_configs"]}
    assert pools == {"low_latency", "high_throughput"}  # the workers dashboard filters on it


def test_grafana_provisioning() -> None:
    datasources = yaml.safe_load((DASHBOARDS / "provisioning/datasources/prometheus.yaml").read_text())
    [source] = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")
    providers = yaml.safe_load((DASHBOARDS / "provisioning/dashboards/higgs.yaml").read_text())
    [provider] = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]


def test_worker_outcome_panels_count_aborts_as_failures() -> None:
    # vllm-omni 0.30.0 counts failed requests in requests_success_total{finished_reason="abort"}.
    panels = {p["title"]: p for p in load_dashboard("workers.json")["panels"] if p["type"] != "row"}
    completed = [t["expr"] for t in panels["Completed requests"]["targets"]]
    failed = [t["expr"] for t in panels["Failed requests"]["targets"]]
    assert all('finished_reason!="abort"' in e for e in completed if "requests_success_total" in e)
    assert any('requests_success_total{pool=~"$pool", instance=~"$instance", finished_reason="abort"}' in e for e in failed)
    ratio = next(t["expr"] for t in panels["Failure ratio"]["targets"])
    assert 'finished_reason="abort"' in ratio and 'finished_reason!="abort"' in ratio
