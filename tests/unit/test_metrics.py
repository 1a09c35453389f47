"""GatewayMetrics: names, labels, pre-initialised series, the scrape-time fleet collector."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, disable_created_metrics, enable_created_metrics
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import load_config
from gateway.metrics import FleetSnapshot, GatewayMetrics, PlannerGauges, RetryReason, UpstreamErrorKind, WorkerSnapshot
from gateway.types import reasons
from gateway.types.labels import NO_POOL, TTFP_BUCKETS, DisconnectPhase, EjectionReason, ProfileChangeResult, RejectReason
from tests.support.prometheus import promtool

# name -> (type, label names) as the classic text format exposes them.
EXPECTED: dict[str, tuple[str, set[str]]] = {
    "higgs_gateway_requests": ("counter", {"sla_class", "pool", "status"}),
    "higgs_gateway_request_duration_seconds": ("histogram", {"sla_class", "pool"}),
    "higgs_gateway_ttfp_seconds": ("histogram", {"sla_class", "pool"}),
    "higgs_gateway_rtf_ratio": ("histogram", {"pool"}),
    "higgs_gateway_audio_seconds": ("counter", {"pool"}),
    "higgs_gateway_routing_decisions": ("counter", {"sla_class", "pool", "reason"}),
    "higgs_gateway_pool_inflight": ("gauge", {"pool"}),
    "higgs_gateway_pool_capacity_slots": ("gauge", {"pool"}),
    "higgs_gateway_worker_inflight": ("gauge", {"pool", "worker"}),
    "higgs_gateway_worker_reported_load": ("gauge", {"pool", "worker"}),
    "higgs_gateway_worker_up": ("gauge", {"pool", "worker"}),
    "higgs_gateway_worker_report_age_seconds": ("gauge", {"pool", "worker"}),
    "higgs_gateway_admission_queue_depth": ("gauge", {"sla_class"}),
    "higgs_gateway_admission_wait_seconds": ("histogram", {"sla_class"}),
    "higgs_gateway_rejections": ("counter", {"sla_class", "reason"}),
    "higgs_gateway_upstream_errors": ("counter", {"pool", "kind"}),
    "higgs_gateway_retries": ("counter", {"reason"}),
    "higgs_gateway_client_disconnects": ("counter", {"phase"}),
    "higgs_gateway_worker_ejections": ("counter", {"pool", "reason"}),
    "higgs_gateway_routing_threshold": ("gauge", {"name"}),
    "higgs_gateway_build_info": ("gauge", {"version"}),
    "higgs_gateway_profile_changes": ("counter", {"from_pool", "to_pool", "result"}),
    "higgs_gateway_profile_change_in_progress": ("gauge", {"from_pool", "to_pool"}),
}
POOLS = ("low_latency", "high_throughput")
CLASSES = ("latency", "balanced", "throughput")


def fleet() -> FleetSnapshot:
    return FleetSnapshot(
        workers=[
            WorkerSnapshot("low_latency", "low_latency-0", inflight=3, reported_load=4.0, up=True, report_age_s=0.4, slots=4),
            WorkerSnapshot("low_latency", "low_latency-1", inflight=1, reported_load=None, up=False, report_age_s=None, slots=4),
            WorkerSnapshot("high_throughput", "high_throughput-0", inflight=20, reported_load=25.0, up=True, report_age_s=1.5, slots=64),
        ],
        queue_depths={"latency": 2},
        thresholds={"balanced_threshold": 4.0, "balanced_hysteresis": 2.0},
    )


def scrape(metrics: GatewayMetrics) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """family -> {sorted label items -> value}; a histogram's value is its _count."""
    text = metrics.render()[0].decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        samples = out.setdefault(family.name, {})
        for s in family.samples:
            if s.name in (family.name, family.name + "_total", family.name + "_count"):
                samples[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(series: dict[tuple[tuple[str, str], ...], float], **labels: str) -> float:
    return series[tuple(sorted(labels.items()))]


def test_every_series_has_its_name_type_and_labels_before_any_traffic() -> None:
    metrics = GatewayMetrics(routing_reasons=reasons.ROUTE_REASONS)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render()[0].decode())}
    for name, (kind, labels) in EXPECTED.items():
        if name in ("higgs_gateway_worker_inflight", "higgs_gateway_worker_reported_load",
                    "higgs_gateway_worker_up", "higgs_gateway_worker_report_age_seconds",
                    "higgs_gateway_routing_threshold"):  # fmt: skip
            continue  # no workers or thresholds without a provider: declared, no samples
        assert name in families, name
        family = families[name]
        assert family.type == kind, name
        sample_labels = {key for s in family.samples for key in s.labels if key != "le"}
        assert sample_labels == labels, name


def test_names_are_ours_and_labels_are_low_cardinality() -> None:
    metrics = GatewayMetrics()
    metrics.set_snapshot_provider(fleet)
    metrics.observe_request(sla_class="latency", pool="low_latency", status=200, duration_s=1, ttfp_s=0.1, audio_s=3)
    allowed = {"sla_class", "pool", "status", "reason", "worker", "kind", "phase", "name", "version", "le", "quantity", "load",
               "from_pool", "to_pool", "result"}
    for family in text_string_to_metric_families(metrics.render()[0].decode()):
        assert not family.name.startswith("vllm")
        assert family.name.startswith(("higgs_gateway_", "process_")), family.name
        for s in family.samples:
            assert set(s.labels) <= allowed, (s.name, s.labels)


def test_known_label_combinations_start_at_zero() -> None:
    metrics = GatewayMetrics(routing_reasons=reasons.ROUTE_REASONS)
    series = scrape(metrics)
    for sla_class in CLASSES:
        assert value(series["higgs_gateway_admission_queue_depth"], sla_class=sla_class) == 0
        for pool in POOLS:
            assert value(series["higgs_gateway_requests"], sla_class=sla_class, pool=pool, status="200") == 0
            assert value(series["higgs_gateway_ttfp_seconds"], sla_class=sla_class, pool=pool) == 0
            for reason in reasons.ROUTE_REASONS:
                assert value(series["higgs_gateway_routing_decisions"], sla_class=sla_class, pool=pool, reason=reason) == 0
        for reject in RejectReason:
            assert value(series["higgs_gateway_rejections"], sla_class=sla_class, reason=reject) == 0
    for pool in POOLS:
        assert value(series["higgs_gateway_pool_capacity_slots"], pool=pool) == 0
        assert value(series["higgs_gateway_pool_inflight"], pool=pool) == 0
        assert value(series["higgs_gateway_audio_seconds"], pool=pool) == 0
        for kind in UpstreamErrorKind:
            assert value(series["higgs_gateway_upstream_errors"], pool=pool, kind=kind) == 0
        for ejection in EjectionReason:
            assert value(series["higgs_gateway_worker_ejections"], pool=pool, reason=ejection) == 0
    for retry in RetryReason:
        assert value(series["higgs_gateway_retries"], reason=retry) == 0
    for phase in DisconnectPhase:
        assert value(series["higgs_gateway_client_disconnects"], phase=phase) == 0
    for source, target in ((POOLS[0], POOLS[1]), (POOLS[1], POOLS[0])):
        assert value(series["higgs_gateway_profile_change_in_progress"], from_pool=source, to_pool=target) == 0
        for result in ProfileChangeResult:
            assert value(series["higgs_gateway_profile_changes"], from_pool=source, to_pool=target, result=result) == 0


def test_reject_vocabulary_matches_the_routing_reasons() -> None:
    assert set(reasons.REJECT_REASONS) <= {r.value for r in RejectReason}


def test_fleet_collector_turns_a_snapshot_into_live_gauges() -> None:
    metrics = GatewayMetrics()
    metrics.set_snapshot_provider(fleet)
    s = scrape(metrics)
    assert value(s["higgs_gateway_pool_inflight"], pool="low_latency") == 4  # down workers still carry leases
    assert value(s["higgs_gateway_pool_inflight"], pool="high_throughput") == 20
    assert value(s["higgs_gateway_pool_capacity_slots"], pool="low_latency") == 4  # only the routable worker
    assert value(s["higgs_gateway_pool_capacity_slots"], pool="high_throughput") == 64
    assert value(s["higgs_gateway_worker_inflight"], pool="low_latency", worker="low_latency-1") == 1
    assert value(s["higgs_gateway_worker_up"], pool="low_latency", worker="low_latency-0") == 1
    assert value(s["higgs_gateway_worker_up"], pool="low_latency", worker="low_latency-1") == 0
    assert value(s["higgs_gateway_worker_reported_load"], pool="high_throughput", worker="high_throughput-0") == 25
    assert value(s["higgs_gateway_worker_report_age_seconds"], pool="low_latency", worker="low_latency-0") == 0.4
    # Never reported: absent, not a misleading 0.
    assert (("pool", "low_latency"), ("worker", "low_latency-1")) not in s["higgs_gateway_worker_reported_load"]
    assert (("pool", "low_latency"), ("worker", "low_latency-1")) not in s["higgs_gateway_worker_report_age_seconds"]
    assert value(s["higgs_gateway_admission_queue_depth"], sla_class="latency") == 2
    assert value(s["higgs_gateway_admission_queue_depth"], sla_class="throughput") == 0
    assert value(s["higgs_gateway_routing_threshold"], name="balanced_threshold") == 4
    assert value(s["higgs_gateway_routing_threshold"], name="balanced_hysteresis") == 2


def test_provider_is_called_once_per_scrape_and_never_on_the_request_path() -> None:
    calls = 0

    def provider() -> FleetSnapshot:
        nonlocal calls
        calls += 1
        return fleet()

    metrics = GatewayMetrics()
    metrics.set_snapshot_provider(provider)
    for _ in range(5):
        metrics.observe_request(sla_class="balanced", pool="low_latency", status=200, duration_s=1, ttfp_s=0.2, audio_s=2)
    assert calls == 0
    metrics.render()
    assert calls == 1
    metrics.render("application/openmetrics-text; version=1.0.0")
    assert calls == 2


def test_a_failing_provider_drops_only_the_live_gauges(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> FleetSnapshot:
        raise RuntimeError("fleet is gone")

    metrics = GatewayMetrics()
    metrics.set_snapshot_provider(broken)
    with caplog.at_level(logging.ERROR, logger="gateway.metrics"):
        s = scrape(metrics)
    assert "higgs_gateway_pool_inflight" not in s
    assert value(s["higgs_gateway_requests"], sla_class="latency", pool="low_latency", status="200") == 0
    assert "fleet snapshot failed" in caplog.text


def test_observe_request_records_every_event_series() -> None:
    metrics = GatewayMetrics()
    metrics.observe_request(sla_class="latency", pool="low_latency", status=200, duration_s=3.0, ttfp_s=0.2, audio_s=10.0)
    metrics.observe_request(sla_class="latency", pool="low_latency", status=502, duration_s=1.0, ttfp_s=0.3, audio_s=1.0)
    metrics.observe_request(sla_class="throughput", pool=None, status=429, duration_s=0.001)
    text = metrics.render()[0].decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}

    def get(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert get("higgs_gateway_requests_total", sla_class="latency", pool="low_latency", status="200") == 1
    assert get("higgs_gateway_requests_total", sla_class="latency", pool="low_latency", status="502") == 1
    assert get("higgs_gateway_requests_total", sla_class="throughput", pool=NO_POOL, status="429") == 1
    assert get("higgs_gateway_ttfp_seconds_count", sla_class="latency", pool="low_latency") == 2
    assert get("higgs_gateway_ttfp_seconds_bucket", sla_class="latency", pool="low_latency", le="0.25") == 1
    assert get("higgs_gateway_request_duration_seconds_sum", sla_class="latency", pool="low_latency") == 4.0
    assert get("higgs_gateway_audio_seconds_total", pool="low_latency") == 11.0
    # RTF only for completed requests: 3 s for 10 s of audio.
    assert get("higgs_gateway_rtf_ratio_count", pool="low_latency") == 1
    assert get("higgs_gateway_rtf_ratio_sum", pool="low_latency") == pytest.approx(0.3)
    # A rejected request has no pool, so no latency series for pool "none".
    assert not any(name.startswith("higgs_gateway_ttfp") and ("pool", NO_POOL) in labels for name, labels in samples)


def test_ttfp_buckets_span_10ms_to_60s() -> None:
    assert TTFP_BUCKETS[0] == 0.01 and TTFP_BUCKETS[-1] == 60.0
    assert 0.5 in TTFP_BUCKETS  # the latency SLO bound the alert rules read


def test_each_instance_has_its_own_registry() -> None:
    before = {m.name for m in REGISTRY.collect()}
    a, b = GatewayMetrics(), GatewayMetrics()
    a.observe_request(sla_class="latency", pool="low_latency", status=200, duration_s=1, ttfp_s=0.1, audio_s=2)
    assert value(scrape(a)["higgs_gateway_requests"], sla_class="latency", pool="low_latency", status="200") == 1
    assert value(scrape(b)["higgs_gateway_requests"], sla_class="latency", pool="low_latency", status="200") == 0
    assert {m.name for m in REGISTRY.collect()} == before
    shared = CollectorRegistry()
    GatewayMetrics(shared, process_metrics=False)
    with pytest.raises(ValueError):  # a second set of the same names on one registry is a bug
        GatewayMetrics(shared, process_metrics=False)


def test_render_speaks_text_and_openmetrics() -> None:
    metrics = GatewayMetrics()
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    body, content_type = metrics.render("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_promtool_accepts_the_exposition() -> None:
    metrics = GatewayMetrics(routing_reasons=reasons.ROUTE_REASONS)
    metrics.set_snapshot_provider(fleet)
    metrics.observe_request(sla_class="latency", pool="low_latency", status=200, duration_s=2, ttfp_s=0.15, audio_s=6)
    metrics.rejections.labels("latency", RejectReason.QUEUE_FULL).inc()
    body, _ = metrics.render()
    done = promtool("check", "metrics", stdin=body.decode())
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr  # no lint warnings


def test_the_composition_root_turns_created_series_off(tmp_path: Path) -> None:
    """``create_app`` throws prometheus_client's process-wide switch: one series per child."""
    try:
        enable_created_metrics()
        assert b"_created" in GatewayMetrics().render()[0]  # the library's default
        app = create_app(load_config(overrides={"data_dir": str(tmp_path), "logging": {"access_log": False}}))
        metrics = app.recorder.metrics
        metrics.observe_request(sla_class="latency", pool="low_latency", status=200, duration_s=1, ttfp_s=0.1, audio_s=2)
        for accept in (None, "application/openmetrics-text;version=1.0.0"):
            body = metrics.render(accept)[0]
            assert b"higgs_gateway_requests_total" in body and b"_created" not in body
    finally:
        disable_created_metrics()  # as every gateway in this process runs


def test_key_usage_is_by_tier_unless_per_key_is_asked() -> None:
    by_tier = GatewayMetrics(key_tiers=["default", "pro"], keys=[("pro", "acme")])
    series = scrape(by_tier)
    assert value(series["higgs_gateway_key_requests"], tier="pro", result="stream_limited") == 0
    assert value(series["higgs_gateway_key_streams"], tier="default") == 0
    by_tier.key_requests.labels(*by_tier.key_series("pro", "acme"), "admitted").inc()
    assert value(scrape(by_tier)["higgs_gateway_key_requests"], tier="pro", result="admitted") == 1
    assert "acme" not in by_tier.render()[0].decode()  # no key name unless asked

    per_key = GatewayMetrics(key_tiers=["default", "pro"], keys=[("pro", "acme")], per_key=True)
    per_key.key_audio_seconds.labels(*per_key.key_series("pro", "acme")).inc(2.5)
    series = scrape(per_key)
    assert value(series["higgs_gateway_key_audio_seconds"], tier="pro", key="acme") == 2.5
    assert {labels for labels in series["higgs_gateway_key_streams"]} == {(("key", "acme"), ("tier", "pro"))}
    assert GatewayMetrics().render()[0].decode().count("higgs_gateway_key_requests_total{") == 0  # no keys, no series


ROOT = Path(__file__).resolve().parents[2]


def exposed_names(metrics: GatewayMetrics) -> set[str]:
    """The gateway's family names as ``/metrics`` writes them (counters with ``_total``)."""
    return {
        family.name + ("_total" if family.type == "counter" else "")
        for family in metrics.registry.collect()
        if family.name.startswith("higgs_gateway_")
    }


def documented_names(doc: Path, section: str) -> set[str]:
    """The series named in the first column of the metric table under ``## {section}``."""
    text = doc.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(higgs_gateway_\w+)` \|", body, flags=re.MULTILINE))


@pytest.mark.parametrize(("doc", "section"), [("README.md", "Observability"), ("docs/observability.md", "Metrics")])
def test_every_series_is_documented_and_every_documented_series_exists(doc: str, section: str) -> None:
    # Every family is declared up front (labelled ones with no children yet); the planner's
    # gauges are exported while a planner runs, so one is attached here.
    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    metrics.set_planner_provider(lambda: PlannerGauges(judged=False))
    exported = exposed_names(metrics)
    documented = documented_names(ROOT / doc, section)
    assert exported - documented == set(), f"series missing from {doc}"
    assert documented - exported == set(), f"{doc} documents series the gateway does not export"


def test_every_rejection_reason_is_documented() -> None:
    text = (ROOT / "docs/observability.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `reason` (rejections) |"))
    assert {reason.value for reason in RejectReason} == set(re.findall(r"`(\w+)` \(", row.split("|")[2]))


def _loop_tasks(metrics: GatewayMetrics) -> float:
    text = metrics.render()[0].decode()
    family = next(f for f in text_string_to_metric_families(text) if f.name == "higgs_gateway_event_loop_tasks")
    return float(family.samples[0].value)


async def test_event_loop_tasks_counts_the_live_tasks_at_scrape_time() -> None:
    import asyncio

    metrics = GatewayMetrics(CollectorRegistry(), process_metrics=False)
    before = _loop_tasks(metrics)
    assert before >= 1  # this test's own task
    release = asyncio.Event()
    waiters = [asyncio.create_task(release.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert _loop_tasks(metrics) == before + 3
    release.set()
    await asyncio.gather(*waiters)
    assert _loop_tasks(metrics) == before


def test_event_loop_tasks_is_nan_off_the_loop() -> None:
    import math

    assert math.isnan(_loop_tasks(GatewayMetrics(CollectorRegistry(), process_metrics=False)))
