"""The autoscalers' queries, evaluated by a real Prometheus.

Two gateway replicas are stood in for by small metrics endpoints exporting the planner's
gauges (``higgs_gateway_desired_workers{pool}``, ``higgs_gateway_planner_judged``); a real
Prometheus scrapes both. The KEDA triggers' queries and the prometheus-adapter rule are
read from the committed manifests and run against it as KEDA and the adapter would:
one value per pool, the max over the replicas that judged, nothing when none did.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.types import PoolName
from tests.support.prometheus import prometheus_bin
from tests.support.procs import free_port, running

pytestmark = pytest.mark.prometheus

K8S = Path(__file__).resolve().parents[2] / "docker" / "k8s"
KEDA = K8S / "components" / "keda-autoscaling" / "scaledobjects.yaml"
ADAPTER = K8S / "components" / "hpa-autoscaling" / "config" / "prometheus-adapter.yaml"
LL, HT = PoolName.LOW_LATENCY.value, PoolName.HIGH_THROUGHPUT.value


class GatewayReplica:
    """A gateway replica's planner gauges on /metrics (the names the planner exports)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.desired = Gauge("higgs_gateway_desired_workers", "Workers the planner wants per pool.", ["pool"], registry=self.registry)
        self.judged = Gauge("higgs_gateway_planner_judged", "1 when the last plan saw enough traffic to judge.", registry=self.registry)
        self.server: http.server.ThreadingHTTPServer | None = None

    def plan(self, judged: bool, **desired: int) -> None:
        self.judged.set(1 if judged else 0)
        for pool, count in desired.items():
            self.desired.labels(pool=pool).set(count)

    @contextmanager
    def serving(self) -> Iterator[str]:
        registry = self.registry

        class Metrics(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


class Prometheus:
    def __init__(self, url: str, targets: list[str]) -> None:
        self.url, self.targets = url, targets

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "success", (expr, body)
        assert body["data"]["resultType"] == "vector", body  # KEDA and the adapter read vectors
        return body["data"]["result"]

    def series(self, match: str) -> list[dict[str, str]]:
        body = httpx.get(f"{self.url}/api/v1/series", params={"match[]": match}, timeout=10).json()
        assert body["status"] == "success", body
        return body["data"]

    def wait_for_scrape(self, expected: dict[str, tuple[bool, dict[str, int]]], timeout_s: float = 30.0) -> None:
        """Until Prometheus holds what each replica (by target) exports now; the queries
        under test are evaluated only after this, never polled for their own answer."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = {
                (row["metric"]["instance"], row["metric"].get("__name__"), row["metric"].get("pool")): float(row["value"][1])
                for row in self.query('{__name__=~"higgs_gateway_desired_workers|higgs_gateway_planner_judged"}')
            }
            wanted = {}
            for instance, (judged, desired) in expected.items():
                wanted[(instance, "higgs_gateway_planner_judged", None)] = 1.0 if judged else 0.0
                wanted |= {(instance, "higgs_gateway_desired_workers", pool): float(n) for pool, n in desired.items()}
            if seen == wanted:
                return
            assert time.monotonic() < deadline, f"Prometheus never scraped {wanted}; it holds {seen}"
            time.sleep(0.25)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[GatewayReplica, GatewayReplica, Prometheus]]:
    """Two gateway replicas' metrics and a real Prometheus scraping them every second."""
    prom_dir = prometheus_bin()
    first, second = GatewayReplica(), GatewayReplica()
    with first.serving() as first_target, second.serving() as second_target:
        port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "higgs-gateway", "static_configs": [{"targets": [first_target, second_target]}]}],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        url = f"http://127.0.0.1:{port}"
        args = [
            str(prom_dir / "prometheus"),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        with running(args, f"{url}/-/ready", tmp_path / "prometheus.log", url):
            yield first, second, Prometheus(url, [first_target, second_target])


def keda_queries() -> dict[str, str]:
    """pool -> the query of the ScaledObject that scales that pool's workers."""
    queries = {}
    for scaled in yaml.safe_load_all(KEDA.read_text()):
        (trigger,) = scaled["spec"]["triggers"]
        queries[scaled["metadata"]["labels"]["higgs-gateway/pool"]] = trigger["metadata"]["query"]
    assert set(queries) == {LL, HT}
    return queries


def adapter_query(pool: str) -> str:
    """The adapter's rule as it queries for an HPA selecting matchLabels {pool: <pool>}
    (namespaced: false, so no namespace matcher is added)."""
    (rule,) = yaml.safe_load(ADAPTER.read_text())["externalRules"]
    assert rule["resources"] == {"namespaced": False}
    return rule["metricsQuery"].replace("<<.Series>>", rule["name"]["as"]).replace("<<.LabelMatchers>>", f'pool="{pool}"')


def keda_value(prometheus: Prometheus, query: str) -> float | None:
    """What KEDA's Prometheus scaler reads: one element, or None for an empty result
    (an error with ignoreNullValues "false": the HPA then holds the current count)."""
    result = prometheus.query(query)
    if not result:
        return None
    (element,) = result  # the scaler refuses more than one
    return float(element["value"][1])


def adapter_values(prometheus: Prometheus, pool: str) -> dict[str, float]:
    return {row["metric"]["pool"]: float(row["value"][1]) for row in prometheus.query(adapter_query(pool))}


def test_autoscaler_queries_take_the_max_of_the_replicas_that_judged(fleet: tuple[GatewayReplica, GatewayReplica, Prometheus]) -> None:
    first, second, prometheus = fleet
    a, b = prometheus.targets
    queries = keda_queries()

    # Both judged; the second replica planned more recently and wants one more LL worker.
    # Several replicas export the same fleet-wide count: the max, never their sum.
    first.plan(judged=True, **{LL: 2, HT: 3})
    second.plan(judged=True, **{LL: 3, HT: 3})
    prometheus.wait_for_scrape({a: (True, {LL: 2, HT: 3}), b: (True, {LL: 3, HT: 3})})
    assert keda_value(prometheus, queries[LL]) == 3
    assert keda_value(prometheus, queries[HT]) == 3
    assert adapter_values(prometheus, LL) == {LL: 3}
    assert adapter_values(prometheus, HT) == {HT: 3}

    # The second replica saw too little traffic to judge: whatever it exports, higher or
    # lower, is left out, and the pools follow the replica that judged.
    second.plan(judged=False, **{LL: 6, HT: 0})
    prometheus.wait_for_scrape({a: (True, {LL: 2, HT: 3}), b: (False, {LL: 6, HT: 0})})
    assert keda_value(prometheus, queries[LL]) == 2
    assert keda_value(prometheus, queries[HT]) == 3
    assert adapter_values(prometheus, LL) == {LL: 2}
    assert adapter_values(prometheus, HT) == {HT: 3}

    # No replica judged: no value at all (KEDA errors, the adapter answers "not found"),
    # so the autoscalers keep the current counts instead of scaling to a guess or to zero.
    first.plan(judged=False, **{LL: 0, HT: 0})
    prometheus.wait_for_scrape({a: (False, {LL: 0, HT: 0}), b: (False, {LL: 6, HT: 0})})
    assert keda_value(prometheus, queries[LL]) is None
    assert keda_value(prometheus, queries[HT]) is None
    assert adapter_values(prometheus, LL) == {} and adapter_values(prometheus, HT) == {}


def test_adapter_rule_discovers_the_desired_worker_series(fleet: tuple[GatewayReplica, GatewayReplica, Prometheus]) -> None:
    first, second, prometheus = fleet
    a, b = prometheus.targets
    first.plan(judged=True, **{LL: 1, HT: 2})
    second.plan(judged=True, **{LL: 1, HT: 2})
    prometheus.wait_for_scrape({a: (True, {LL: 1, HT: 2}), b: (True, {LL: 1, HT: 2})})
    (rule,) = yaml.safe_load(ADAPTER.read_text())["externalRules"]
    # The adapter lists the series its seriesQuery matches and names the metric by `name`.
    found = prometheus.series(rule["seriesQuery"])
    assert {(s["__name__"], s["pool"]) for s in found} == {(rule["name"]["as"], LL), (rule["name"]["as"], HT)}
