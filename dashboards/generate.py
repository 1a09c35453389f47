"""Generate the Grafana dashboards and the Prometheus alert rules in this folder.

    python dashboards/generate.py                        # rewrite the JSON and alerts.yml
    python dashboards/generate.py --check                # exit 1 if a committed file is out of date
    python dashboards/generate.py --config gateway.yaml --out my-dashboards/

Targets (the latency TTFP target and objective, how long degraded serving may last before
an alert) come from the gateway config's ``slo`` section: the committed files are made
from the defaults, ``--config`` makes them for your gateway's own targets. The alert rules
are ``alerts.template.yml`` with those values filled in.

Built with grafana-foundation-sdk (the test extra installs it). The committed JSON is
what Grafana provisions; tests compare it with this script's output, and evaluate every
panel expression against a real Prometheus.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.utils import floatToGoString

from gateway.config import GatewayConfig, SloConfig, load_config
from gateway.types.labels import TTFP_BUCKETS
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.builders.common import VizLegendOptions, VizTooltipOptions
from grafana_foundation_sdk.builders.dashboard import (
    CustomVariable,
    Dashboard,
    DatasourceVariable,
    QueryVariable,
    Row,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement, SortOrder, TooltipDisplayMode
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    DynamicConfigValue,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

HERE = Path(__file__).resolve().parent
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
# Options of $ttfp_target must equal TTFP histogram bucket bounds as exported (le="0.5").
TTFP_TARGETS = tuple(floatToGoString(b) for b in TTFP_BUCKETS if 0.2 <= b <= 2.0)
ALERTS_TEMPLATE = HERE / "alerts.template.yml"
TAGS = ["higgs-gateway", "generated"]


@dataclass(frozen=True)
class Q:
    """One panel query; ``guide`` marks reference lines (targets, thresholds): drawn dashed."""

    expr: str
    legend: str
    guide: bool = False


def m(*matchers: str) -> str:
    """A label selector body from matcher strings, e.g. m(INST, POOL) -> '{instance=~"$instance",...}'."""
    return "{" + ", ".join(matchers) + "}"


INST = 'instance=~"$instance"'
POOL = 'pool=~"$pool"'
CLASS = 'sla_class=~"$sla_class"'
LATENCY = 'sla_class="latency"'


def _targets(queries: Sequence[Q]) -> list[Dataquery]:
    return [
        Dataquery().expr(q.expr).legend_format(q.legend).ref_id(chr(ord("A") + i)).datasource(DS).range()
        for i, q in enumerate(queries)
    ]


def ts(
    title: str,
    description: str,
    queries: Sequence[Q],
    *,
    unit: str = "short",
    width: int = 12,
    height: int = 8,
    min_val: float | None = 0,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .span(width)
        .height(height)
        .line_width(1)
        .fill_opacity(10)
        .legend(VizLegendOptions().show_legend(True).display_mode(LegendDisplayMode.LIST).placement(LegendPlacement.BOTTOM))
        .tooltip(VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING))
        .targets(_targets(queries))
    )
    if min_val is not None:
        panel = panel.min(min_val)
    for i, q in enumerate(queries):
        if q.guide:
            panel = panel.override_by_query(
                chr(ord("A") + i),
                [
                    DynamicConfigValue("custom.lineStyle", {"fill": "dash", "dash": [10, 10]}),
                    DynamicConfigValue("custom.fillOpacity", 0),
                    DynamicConfigValue("color", {"mode": "fixed", "fixedColor": "red"}),
                ],
            )
    return panel


def stat_panel(title: str, description: str, queries: Sequence[Q], *, unit: str = "short", width: int = 6) -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .span(width)
        .height(8)
        .targets(_targets(queries))
    )


def datasource_var() -> DatasourceVariable:
    return DatasourceVariable("datasource").label("Data source").type("prometheus")


def query_var(name: str, label: str, query: str) -> QueryVariable:
    # All = ".*" (not Grafana's "a|b|c" list) so series with label values unseen when the
    # dashboard loaded, such as pool="none", still match.
    return (
        QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(VariableOption(selected=True, text=["All"], value=["$__all"]))
    )


def quantiles(metric: str, by: str, selector: str, legend: str, qs: Sequence[float] = (0.5, 0.95, 0.99)) -> list[Q]:
    return [
        Q(
            f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{selector}[{RATE}])))",
            f"{legend} p{round(q * 100)}",
        )
        for q in qs
    ]


def share(metric: str, by: str, part: str, whole: str) -> str:
    """part/whole of a counter's rate; 0 (not absent) while the part has never happened."""
    w = f"sum by ({by}) (rate({metric}{whole}[{RATE}]))"
    return f"(sum by ({by}) (rate({metric}{part}[{RATE}])) or 0 * {w}) / {w}"


def bucket_bound(seconds: float) -> str:
    """A TTFP target as prometheus_client writes the bucket's ``le`` label."""
    return floatToGoString(seconds)


def overview(slo: SloConfig) -> Dashboard:
    target_s = bucket_bound(slo.latency_ttfp_target_s)
    targets = sorted({*TTFP_TARGETS, target_s}, key=float)
    req = "higgs_gateway_requests_total"
    ttfp = "higgs_gateway_ttfp_seconds"
    rd = "higgs_gateway_routing_decisions_total"
    cpi = m(CLASS, POOL, INST)
    pi = m(POOL, INST)
    ci = m(CLASS, INST)
    i = m(INST)
    d = (
        Dashboard("Higgs gateway: overview")
        .uid("higgs-gateway-overview")
        .description("Traffic, TTFP/RTF per SLA class and pool, routing, capacity, admission and worker health, from the gateway's own series.")
        .tags(TAGS)
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("10s")
        .time("now-1h", "now")
        .timezone("browser")
        .with_variable(datasource_var())
        .with_variable(query_var("instance", "Gateway", "label_values(higgs_gateway_build_info, instance)"))
        .with_variable(query_var("pool", "Pool", "label_values(higgs_gateway_pool_capacity_slots, pool)"))
        .with_variable(query_var("sla_class", "SLA class", "label_values(higgs_gateway_admission_queue_depth, sla_class)"))
        .with_variable(
            CustomVariable("ttfp_target")
            .label("Latency TTFP target (s)")
            .description("The latency class's TTFP objective; options are TTFP histogram bucket bounds.")
            .values(",".join(targets))
            .allow_custom_value(False)
            .current(VariableOption(selected=True, text=target_s, value=target_s))
            .options([VariableOption(selected=v == target_s, text=v, value=v) for v in targets])
        )
    )

    d = d.with_row(Row("Traffic"))
    d = d.with_panel(ts(
        "Requests by class and pool", "Finished requests per second; pool \"none\" = never reached a pool (rejected, invalid).",
        [Q(f"sum by (sla_class, pool) (rate({req}{cpi}[{RATE}]))", "{{sla_class}} → {{pool}}")], unit="reqps",
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Responses by status", "Finished requests per second by HTTP status (429/503 = admission, 499 = client left).",
        [Q(f"sum by (status) (rate({req}{cpi}[{RATE}]))", "{{status}}")], unit="reqps",
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Server errors (5xx) by class and pool", "Share of finished requests that ended in a 5xx.",
        [Q(share(req, "sla_class, pool", m(CLASS, POOL, INST, 'status=~"5.."'), cpi), "{{sla_class}} → {{pool}}")],
        unit="percentunit",
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Audio delivered by pool", "Seconds of audio sent to clients per second of wall time (audio throughput).",
        [Q(f"sum by (pool) (rate(higgs_gateway_audio_seconds_total{pi}[{RATE}]))", "{{pool}}")],
    ))  # fmt: skip

    d = d.with_row(Row("Latency"))
    target = Q("vector($ttfp_target)", "latency target", guide=True)
    lat = m(POOL, INST, LATENCY)
    within = m(POOL, INST, LATENCY, 'le="$ttfp_target"')
    for q, label in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        d = d.with_panel(ts(
            f"TTFP {label} by class and pool", "Request start to first audio byte sent, at the gateway.",
            [*quantiles(ttfp, "sla_class, pool", cpi, "{{sla_class}} → {{pool}}", (q,)), target], unit="s", width=8,
        ))  # fmt: skip
    d = d.with_panel(ts(
        "Latency class: first audio within target", f"Share of latency-class requests whose TTFP was at most $ttfp_target s (the SLO; the alerts use {target_s} s and {slo.latency_ttfp_objective:.4g}).",
        [Q(f"sum by (pool) (rate({ttfp}_bucket{within}[{RATE}])) / sum by (pool) (rate({ttfp}_count{lat}[{RATE}]))", "{{pool}}"),
         Q(f"vector({slo.latency_ttfp_objective:g})", "objective", guide=True)],
        unit="percentunit", width=8, min_val=None,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "RTF by pool", "Real-time factor (request duration / audio seconds) of completed requests; below 1 = faster than real time.",
        [*quantiles("higgs_gateway_rtf_ratio", "pool", pi, "{{pool}}", (0.5, 0.95)), Q("vector(1)", "real time", guide=True)], width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Request duration p95 by class and pool", "Request start to last byte (or failure).",
        quantiles("higgs_gateway_request_duration_seconds", "sla_class, pool", cpi, "{{sla_class}} → {{pool}}", (0.95,)),
        unit="s", width=8,
    ))  # fmt: skip

    d = d.with_row(Row("Routing and capacity"))
    d = d.with_panel(ts(
        "Routing decisions by reason", "Requests routed per second, by SLA class, chosen pool and the policy's reason.",
        [Q(f"sum by (sla_class, pool, reason) (rate({rd}{cpi}[{RATE}]))", "{{sla_class}} → {{pool}} ({{reason}})")], unit="reqps",
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Spill-over share by class", "Share of routing decisions whose reason starts with spill_ (left the class's preferred pool).",
        [Q(share(rd, "sla_class", m(CLASS, POOL, INST, 'reason=~"spill_.*"'), cpi), "{{sla_class}}")], unit="percentunit",
    ))  # fmt: skip
    d = d.with_panel(ts(
        "In flight vs capacity per pool", "This gateway's requests in flight against the slots of routable workers (dashed).",
        [Q(f"sum by (pool) (higgs_gateway_pool_inflight{pi})", "{{pool}} in flight"),
         Q(f"max by (pool) (higgs_gateway_pool_capacity_slots{pi})", "{{pool}} capacity", guide=True)],
    ))  # fmt: skip
    bt = "max(higgs_gateway_routing_threshold" + m(INST, 'name="balanced_threshold"') + ")"
    bh = "max(higgs_gateway_routing_threshold" + m(INST, 'name="balanced_hysteresis"') + ")"
    d = d.with_panel(ts(
        "Fleet in flight vs balanced threshold", "Balanced requests leave the low-latency pool above the threshold and return below threshold − hysteresis.",
        [Q(f"sum(higgs_gateway_pool_inflight{i})", "fleet in flight"),
         Q(bt, "balanced threshold", guide=True), Q(f"{bt} - {bh}", "threshold − hysteresis", guide=True)],
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Per-worker load", "Requests this gateway has on each worker, and the worker's own running+waiting count (all gateways).",
        [Q(f"sum by (pool, worker) (higgs_gateway_worker_inflight{pi})", "{{worker}} own"),
         Q(f"max by (pool, worker) (higgs_gateway_worker_reported_load{pi})", "{{worker}} reported")],
        width=18,
    ))  # fmt: skip
    d = d.with_panel(stat_panel(
        "Routing thresholds", "Current effective value of every routing threshold (changeable through the admin API).",
        [Q(f"max by (name) (higgs_gateway_routing_threshold{i})", "{{name}}")],
    ))  # fmt: skip

    d = d.with_row(Row("Routing predictions"))
    pr = "higgs_gateway_prediction_ratio_bucket"
    d = d.with_panel(ts(
        "Prediction error (observed / predicted)",
        "Median and 90th percentile of observed / predicted per completed stream, by pool: TTFP and the stream's "
        "decode RTF. 1.0 (dashed) is a perfect prediction; a line far from it means the curves have not caught up "
        "(a restarted or throttled worker) or learning is off.",
        [Q(f"histogram_quantile(0.5, sum by (pool, quantity, le) (rate({pr}{pi}[{RATE}])))", "{{pool}} {{quantity}} p50"),
         Q(f"histogram_quantile(0.9, sum by (pool, quantity, le) (rate({pr}{pi}[{RATE}])))", "{{pool}} {{quantity}} p90"),
         Q("vector(1)", "exact", guide=True)],
        min_val=None,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Learned RTF by worker and load",
        "Each worker's learned curve: the RTF of every stream on it at a given load (its prior until it has served). "
        "The policy keeps balanced streams under routing.thresholds.balanced_rtf_ceiling.",
        [Q(f"max by (worker, load) (higgs_gateway_worker_predicted_rtf{pi})", "{{worker}} at {{load}}"),
         Q("max(higgs_gateway_routing_threshold" + m(INST, 'name="balanced_rtf_ceiling"') + ")", "balanced ceiling", guide=True)],
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Learned TTFP by worker and load",
        "Each worker's learned time to first packet for a request that makes its load `load`.",
        [Q(f"max by (worker, load) (higgs_gateway_worker_predicted_ttfp_seconds{pi})", "{{worker}} at {{load}}")],
        unit="s", width=24,
    ))  # fmt: skip

    d = d.with_row(Row("Admission"))
    d = d.with_panel(ts(
        "Queue depth by class", "Requests waiting in admission for a slot.",
        [Q(f"sum by (sla_class) (higgs_gateway_admission_queue_depth{ci})", "{{sla_class}}")], width=6,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Queue net flow by class", "Change of queue depth per second: above 0 the queue grows (arrivals outpace slots).",
        [Q(f"sum by (sla_class) (deriv(higgs_gateway_admission_queue_depth{ci}[{RATE}]))", "{{sla_class}}")],
        width=6, min_val=None,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Admission wait by class", "Time requests waited for a slot before routing.",
        quantiles("higgs_gateway_admission_wait_seconds", "sla_class", ci, "{{sla_class}}", (0.5, 0.95, 0.99)),
        unit="s", width=6,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Rejections by class and reason", "Requests turned away by admission per second.",
        [Q(f"sum by (sla_class, reason) (rate(higgs_gateway_rejections_total{ci}[{RATE}]))", "{{sla_class}}: {{reason}}")],
        unit="reqps", width=6,
    ))  # fmt: skip

    d = d.with_row(Row("Voice sessions"))
    d = d.with_panel(ts(
        "Sessions and utterances", "Voice sessions open (WebSocket /v1/audio/speech/stream), and utterances started per second.",
        [Q(f"sum(higgs_gateway_sessions_open{i})", "sessions open"),
         Q(f"sum(rate(higgs_gateway_session_utterances_total{i}[{RATE}]))", "utterances/s")],
        width=6,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Sentences by pool and reason", "Session sentences placed per second: first sentences as latency (fastest_ttfp), later ones by their deadline (deadline_met / deadline_missed).",
        [Q(f"sum by (pool, reason) (rate(higgs_gateway_session_sentences_total{pi}[{RATE}]))", "{{pool}}: {{reason}}")],
        unit="reqps", width=6,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Session time to first audio and gaps", "Per utterance: first sentence complete to its first audio sent; and the silence a real-time player sits through before each later sentence (0 is the goal).",
        [*quantiles("higgs_gateway_session_first_audio_seconds", "instance", i, "first audio", (0.5, 0.99)),
         *quantiles("higgs_gateway_session_gap_seconds", "instance", i, "gap", (0.5, 0.99))],
        unit="s", width=6,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Barge-ins", "input.cancel per second, and the time from it to every upstream request of the utterance ended.",
        [Q(f"sum(rate(higgs_gateway_session_barge_in_seconds_count{i}[{RATE}]))", "barge-ins/s"),
         *quantiles("higgs_gateway_session_barge_in_seconds", "instance", i, "cancel latency", (0.5, 0.99))],
        width=6,
    ))  # fmt: skip

    d = d.with_row(Row("Worker health and failures"))
    up = f"max by (pool, worker) (higgs_gateway_worker_up{pi})"
    d = d.with_panel(ts(
        "Routable workers per pool", "Workers ready to take traffic, and all workers the gateway knows (dashed).",
        [Q(f"sum by (pool) ({up})", "{{pool}} routable"), Q(f"count by (pool) ({up})", "{{pool}} known", guide=True)],
        width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Worker load-report age", "Seconds since each worker's last /load report; stale reports are ignored by routing.",
        [Q(f"max by (pool, worker) (higgs_gateway_worker_report_age_seconds{pi})", "{{worker}}")], unit="s", width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Worker ejections and restarts", "Workers taken out of routing, and worker restarts noticed (replayed before serving again), in the last 5 minutes, by pool and reason.",
        [Q(f"sum by (pool, reason) (increase(higgs_gateway_worker_ejections_total{pi}[5m]))", "ejected {{pool}}: {{reason}}"),
         Q(f"sum by (pool, reason) (increase(higgs_gateway_worker_restarts_total{pi}[5m]))", "restarted {{pool}}: {{reason}}")],
        width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Degraded serving", "Seconds each pool has had no routable worker (0 while it has one); while one pool is empty the other serves every class and /ready says degraded.",
        [Q(f"max by (pool) (higgs_gateway_pool_empty_seconds{pi})", "{{pool}} empty for"),
         Q(f"max(higgs_gateway_degraded{i}) * {slo.degraded_alert_after_s}", "degraded (alert after)", guide=True)],
        unit="s", width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Upstream errors by pool and kind", "Failed worker calls per second.",
        [Q(f"sum by (pool, kind) (rate(higgs_gateway_upstream_errors_total{pi}[{RATE}]))", "{{pool}}: {{kind}}")],
        unit="reqps", width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Retries and client disconnects", "Retries on another worker (before the first byte) and clients that left, per second.",
        [Q(f"sum by (reason) (rate(higgs_gateway_retries_total{i}[{RATE}]))", "retry: {{reason}}"),
         Q(f"sum by (phase) (rate(higgs_gateway_client_disconnects_total{i}[{RATE}]))", "disconnect: {{phase}}")],
        unit="reqps", width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Gateway CPU", "CPU cores each gateway process uses (the relay is the hot path's main cost).",
        [Q(f"sum by (instance) (rate(process_cpu_seconds_total{i}[{RATE}]) and on (instance) higgs_gateway_build_info)", "{{instance}}")],
        width=6,
    ))  # fmt: skip
    d = d.with_panel(stat_panel(
        "Gateway versions", "Gateway processes per version.",
        [Q(f"count by (version) (higgs_gateway_build_info{i})", "{{version}}")], width=2,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Shared state backend up",
        "1 while each gateway reaches its state backend (always 1 for local; 0: Redis unreachable, serving "
        "from the last known state, admin writes answer 503).",
        [Q(f"min by (instance, backend) (higgs_gateway_state_backend_up{i})", "{{instance}} ({{backend}})")],
        width=6,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "GPU profile changes",
        "Supervised GPUs moved from one pool's profile to the other's (supervisor.profile_changes) in the last hour, "
        "by how each ended; dashed: a change in progress (drain, restart, warm-up).",
        [Q(f"sum by (from_pool, to_pool, result) (increase(higgs_gateway_profile_changes_total{i}[1h]))",
           "{{from_pool}} → {{to_pool}}: {{result}}"),
         Q(f"max by (from_pool, to_pool) (higgs_gateway_profile_change_in_progress{i})",
           "{{from_pool}} → {{to_pool}} in progress", guide=True)],
        width=10,
    ))  # fmt: skip
    d = d.with_row(Row("Audio quality"))
    d = d.with_panel(ts(
        "Scored streams by verdict", "Streams scored for audio quality per second (docs/quality.md), by pool and verdict: "
        "ok, noisy (HNR below the floor), clipped, silent, level.",
        [Q(f"sum by (pool, verdict) (rate(higgs_gateway_quality_samples_total{pi}[{RATE}]))", "{{pool}}: {{verdict}}")],
        unit="reqps", width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "HNR by decode batch", "Median harmonics-to-noise ratio of scored streams by pool and decode batch; dashed: the "
        "-2 dB bar vllm-omni's CI holds Higgs to. A drop from one batch size up points at a CUDA-graph path.",
        [*quantiles("higgs_gateway_quality_hnr_db", "pool, batch", pi, "{{pool}} batch {{batch}}", (0.5,)),
         Q("vector(-2)", "CI floor", guide=True)],
        unit="dB", width=8, min_val=None,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Workers' recent quality failures", "Share of each worker's recent scored streams that failed a check (its window; "
        "ejected for quality at eject_after_bad), and samples dropped because the scorer was busy.",
        [Q(f"max by (pool, worker) (higgs_gateway_quality_bad_share{pi})", "{{worker}}"),
         Q(f"sum(rate(higgs_gateway_quality_dropped_total{i}[{RATE}]))", "dropped /s", guide=True)],
        width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Word error rate", "Where quality.wer is on (the recogniser extra): median word error rate of transcribed streams "
        "against their input text by pool, each worker's recent mean (its wer.window; ejected for quality above "
        "wer.max_wer), and dashed, streams not transcribed because the recogniser was busy, and its CPU seconds per "
        "second of audio heard.",
        [*quantiles("higgs_gateway_quality_wer", "pool", pi, "{{pool}}", (0.5,)),
         Q(f"max by (pool, worker) (higgs_gateway_quality_wer_mean{pi})", "{{worker}} recent mean"),
         Q(f"sum(rate(higgs_gateway_quality_wer_dropped_total{i}[{RATE}]))", "not transcribed /s", guide=True),
         Q(f"sum(rate(higgs_gateway_quality_wer_cpu_seconds_total{i}[{RATE}])) / "
           f"sum(rate(higgs_gateway_quality_wer_audio_seconds_total{i}[{RATE}]))", "recogniser CPU s per audio s", guide=True)],
        width=24,
    ))  # fmt: skip
    return d


def workers() -> Dashboard:
    w = m(POOL, INST)
    by = "pool, instance"
    d = (
        Dashboard("Higgs gateway: workers")
        .uid("higgs-gateway-workers")
        .description("Each vllm-omni worker's own series (vllm_omni:*), per pool and instance.")
        .tags(TAGS)
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("10s")
        .time("now-1h", "now")
        .timezone("browser")
        .with_variable(datasource_var())
        .with_variable(query_var("pool", "Pool", "label_values(vllm_omni:num_requests_running, pool)"))
        .with_variable(query_var("instance", "Worker", 'label_values(vllm_omni:num_requests_running{pool=~"$pool"}, instance)'))
    )
    d = d.with_row(Row("Load"))
    d = d.with_panel(ts(
        "Running requests", "Requests in the worker's engine batch (the low-latency profile runs up to 16, high-throughput 64).",
        [Q(f"sum by ({by}) (vllm_omni:num_requests_running{w})", "{{pool}} {{instance}}")],
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Waiting requests", "Requests queued inside the worker beyond max_num_seqs (it never answers 429: admission is the gateway's job).",
        [Q(f"sum by ({by}) (vllm_omni:num_requests_waiting{w})", "{{pool}} {{instance}}")],
    ))  # fmt: skip
    d = d.with_row(Row("Latency"))
    for q, label in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        d = d.with_panel(ts(
            f"TTFP {label} per worker", "Worker-side time to first audio packet (streaming requests only).",
            quantiles("vllm_omni:audio_ttfp_s", by, w, "{{pool}} {{instance}}", (q,)), unit="s", width=8,
        ))  # fmt: skip
    d = d.with_panel(ts(
        "RTF per worker", "Worker-side real-time factor (final stage generation time / audio duration).",
        [*quantiles("vllm_omni:audio_rtf", by, w, "{{pool}} {{instance}}", (0.5, 0.95)), Q("vector(1)", "real time", guide=True)],
        width=24,
    ))  # fmt: skip
    d = d.with_row(Row("Outcomes"))
    # vllm_omni:requests_success_total counts every finished request by finished_reason, the
    # failed ones as "abort" (vllm-omni 0.30.0 metrics/prometheus.py: request_failed).
    completed = m(POOL, INST, 'finished_reason!="abort"')
    aborted = m(POOL, INST, 'finished_reason="abort"')
    ok = f"sum by ({by}) (rate(vllm_omni:requests_success_total{completed}[{RATE}]))"
    failed = f"(sum by ({by}) (rate(vllm_omni:requests_success_total{aborted}[{RATE}])) or 0 * {ok})"
    d = d.with_panel(ts(
        "Completed requests", "Requests per second per worker that finished with audio (finished_reason stop or length).",
        [Q(ok, "{{pool}} {{instance}}")], unit="reqps", width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Failed requests", "Requests per second per worker that ended without their audio (finished_reason=\"abort\"); "
        "vllm_omni:requests_failed_total{reason} says why (client_abort, client_disconnect, stage_error, unknown).",
        [Q(failed, "{{pool}} {{instance}}")], unit="reqps", width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Failure ratio", "Failed / (failed + successful) per worker.",
        [Q(f"{failed} / ({failed} + {ok})", "{{pool}} {{instance}}")], unit="percentunit", width=8,
    ))  # fmt: skip
    d = d.with_panel(ts(
        "Audio generated per worker", "Seconds of audio each worker finished per second of wall time (its throughput).",
        [Q(f"sum by ({by}) (rate(vllm_omni:audio_duration_s_sum{w}[{RATE}]))", "{{pool}} {{instance}}")],
    ))  # fmt: skip
    scraped = m(POOL, INST, 'pool!=""')  # only worker targets carry a pool label
    d = d.with_panel(ts(
        "Scrape health", "1 when Prometheus could scrape the worker's /metrics.",
        [Q(f"max by ({by}) (up{scraped})", "{{pool}} {{instance}}")],
    ))  # fmt: skip
    return d


DASHBOARDS = {"gateway-overview.json": lambda slo: overview(slo), "workers.json": lambda slo: workers()}


def prometheus_duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def alert_rules(slo: SloConfig, source: str = "the default gateway config") -> str:
    """alerts.yml: the template with the config's targets filled in."""
    budget = 1 - slo.latency_ttfp_objective
    values = {
        "GENERATED": f"Generated by dashboards/generate.py from {source}: edit alerts.template.yml, not this file.",
        "TTFP_TARGET": bucket_bound(slo.latency_ttfp_target_s),
        "BUDGET": f"{budget:.6g}",
        "BUDGET_PERCENT": f"{budget * 100:.4g}%",
        "OBJECTIVE_PERCENT": f"{slo.latency_ttfp_objective * 100:.4g}%",
        "DEGRADED_FOR": prometheus_duration(slo.degraded_alert_after_s),
    }
    text = ALERTS_TEMPLATE.read_text()
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    if "@@" in text:
        raise ValueError("alerts.template.yml has a placeholder generate.py does not fill")
    return text


def render_all(config: GatewayConfig | None = None, source: str = "the default gateway config") -> dict[str, str]:
    """File name -> the text the file must hold (the committed ones: the default config)."""
    slo = (config or GatewayConfig()).slo
    encoder = JSONEncoder(sort_keys=True, indent=2)
    out = {}
    for name, build in DASHBOARDS.items():
        model = build(slo).build()
        for n, panel in enumerate(model.panels or [], start=1):
            panel.id_val = n  # Grafana links and embeds panels by id: unique and stable
        out[name] = encoder.encode(model) + "\n"
    out["alerts.yml"] = alert_rules(slo, source)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON differs")
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write (default: beside this script)")
    parser.add_argument("--config", type=Path, default=None, help="the gateway config whose slo targets to use")
    args = parser.parse_args(argv)
    stale = []
    config = load_config(args.config) if args.config is not None else None
    source = args.config.name if args.config is not None else "the default gateway config"
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in render_all(config, source).items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date: {', '.join(stale)}; run python dashboards/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
