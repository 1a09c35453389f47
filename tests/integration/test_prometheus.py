"""End to end: a real Prometheus scrapes a real gateway and emulated workers under load,
then every panel expression of every committed dashboard must return data."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
import yaml

from tests.support.prometheus import DASHBOARD_FILES, DASHBOARDS, expand, load_dashboard, panel_queries, prometheus_bin
from tests.support.procs import GATEWAY_CLI, Proc, free_port, running, running_emulator

pytestmark = pytest.mark.prometheus

GATEWAY_SERIES = (
    "higgs_gateway_requests_total",
    "higgs_gateway_request_duration_seconds_bucket",
    "higgs_gateway_ttfp_seconds_bucket",
    "higgs_gateway_rtf_ratio_bucket",
    "higgs_gateway_audio_seconds_total",
    "higgs_gateway_routing_decisions_total",
    "higgs_gateway_pool_inflight",
    "higgs_gateway_pool_capacity_slots",
    "higgs_gateway_worker_inflight",
    "higgs_gateway_worker_reported_load",
    "higgs_gateway_worker_up",
    "higgs_gateway_worker_report_age_seconds",
    "higgs_gateway_admission_queue_depth",
    "higgs_gateway_admission_wait_seconds_bucket",
    "higgs_gateway_rejections_total",
    "higgs_gateway_upstream_errors_total",
    "higgs_gateway_retries_total",
    "higgs_gateway_client_disconnects_total",
    "higgs_gateway_worker_ejections_total",
    "higgs_gateway_routing_threshold",
    "higgs_gateway_build_info",
)
WORKER_SERIES = (
    "vllm_omni:num_requests_running",
    "vllm_omni:num_requests_waiting",
    "vllm_omni:audio_ttfp_s_bucket",
    "vllm_omni:audio_rtf_bucket",
    "vllm_omni:requests_success_total",
    "vllm_omni:audio_duration_s_sum",
)
CLASSES = ("latency", "balanced", "throughput")
REQUESTS = 30
TEXT = "The quick brown fox jumps over the lazy dog near the river bank."


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Proc, Proc, dict[str, str]]]:
    """Two emulated workers (one per pool), the gateway in front, and Prometheus scraping all three."""
    prom_dir = prometheus_bin()  # before anything starts: may install the package
    with (
        running_emulator(tmp_path, "higgs_multimodal_qwen3_low_latency.yaml", name="ll") as ll,
        running_emulator(tmp_path, "higgs_multimodal_qwen3_high_throughput.yaml", name="ht") as ht,
    ):
        workers = {"low_latency": ll.url, "high_throughput": ht.url}
        port = free_port()
        config = {
            "server": {"host": "127.0.0.1", "port": port},
            "pools": {
                "low_latency": {"profile": "higgs_multimodal_qwen3_low_latency.yaml", "workers": [ll.url]},
                "high_throughput": {"profile": "higgs_multimodal_qwen3_high_throughput.yaml", "workers": [ht.url]},
            },
            "health": {"interval_s": 0.5},
            "load_reports": {"interval_s": 0.5},
            "logging": {"level": "WARNING"},
            # Every stream scored: a (pool, batch) series born with one observation has no rate, so
            # at the default share the HNR panel could stay empty on a slow run (0/0 is NaN).
            # Transcribed too (the recogniser extra is part of the test install), for the WER panels.
            "quality": {"sample_share": 1.0, "max_per_s": 0, "wer": {"enabled": True, "sample_share": 1.0}},
            "data_dir": str(tmp_path / "data"),
        }
        config_path = tmp_path / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(config))
        gateway_url = f"http://127.0.0.1:{port}"
        with running(
            [*GATEWAY_CLI, "serve", "--config", str(config_path)], f"{gateway_url}/ready?require=every_pool", tmp_path / "gateway.log", gateway_url
        ) as gateway:
            prom_port = free_port()
            prom_config = {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(DASHBOARDS / "alerts.yml")],
                "scrape_configs": [
                    {"job_name": "higgs-gateway", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
                    {
                        "job_name": "higgs-workers",
                        "static_configs": [
                            {"targets": [url.removeprefix("http://")], "labels": {"pool": pool}}
                            for pool, url in workers.items()
                        ],
                    },
                ],
            }
            (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom_config))
            prom_url = f"http://127.0.0.1:{prom_port}"
            args = [
                str(prom_dir / "prometheus"),
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=warn",
            ]
            with running(args, f"{prom_url}/-/ready", tmp_path / "prometheus.log", prom_url) as prometheus:
                yield gateway, prometheus, workers


async def send_load(gateway_url: str) -> Counter[str]:
    """REQUESTS streamed PCM requests over about 3 s (several scrapes), cycling through the SLA classes."""
    sent: Counter[str] = Counter()
    limit = asyncio.Semaphore(6)

    async def one(client: httpx.AsyncClient, i: int) -> None:
        await asyncio.sleep(i * 0.1)
        sla_class = CLASSES[i % len(CLASSES)]
        body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm", "stream_format": "audio"}
        async with limit, client.stream("POST", "/v1/audio/speech", json=body, headers={"x-sla-class": sla_class}) as r:
            audio = b"".join([chunk async for chunk in r.aiter_bytes()])
            assert r.status_code == 200, audio[:500]
            assert len(audio) > 0
        sent[sla_class] += 1

    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as client:
        await asyncio.gather(*(one(client, i) for i in range(REQUESTS)), *(voice_session(gateway_url, i) for i in range(3)))
    return sent


async def voice_session(gateway_url: str, i: int) -> None:
    """A voice session beside the requests (the dashboard's session row): a two-sentence
    reply played out, then one interrupted by input.cancel."""
    await asyncio.sleep(i * 0.8)
    url = gateway_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with websockets.connect(url, max_size=None) as ws:
        config = {"type": "session.config", "response_format": "pcm", "stream_audio": True, "split_granularity": "sentence"}
        await ws.send(json.dumps(config))
        for message in ({"type": "input.text", "text": f"{TEXT} {TEXT}"}, {"type": "input.done"}):
            await ws.send(json.dumps(message))
        while not (isinstance(frame := await ws.recv(), str) and json.loads(frame)["type"] == "session.done"):
            pass
        await ws.send(json.dumps({"type": "input.text", "text": f"{TEXT} {TEXT} "}))
        while isinstance(await ws.recv(), str):  # until its first audio
            pass
        await ws.send(json.dumps({"type": "input.cancel"}))
        while not (isinstance(frame := await ws.recv(), str) and json.loads(frame)["type"] == "input.cancelled"):
            pass


def query(prom: httpx.Client, expr: str) -> list[dict[str, Any]]:
    response = prom.get("/api/v1/query", params={"query": expr})
    payload = response.json()
    if response.status_code != 200 or payload.get("status") != "success":
        raise AssertionError(f"{expr}: {payload.get('errorType')}: {payload.get('error')}")
    result = payload["data"]["result"]
    return result if isinstance(result, list) else [result]


def wait_for(prom: httpx.Client, expr: str, want: float, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        got = query(prom, expr)
        if got and float(got[0]["value"][1]) == want:
            return
        time.sleep(0.25)
    raise AssertionError(f"{expr} never reached {want}: {got}")


def wait_until_positive(prom: httpx.Client, expr: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        got = query(prom, expr)
        if got and float(got[0]["value"][1]) > 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"{expr} never above 0 in {timeout:g} s: {got}")


def finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result)


def test_every_dashboard_query_returns_data(stack: tuple[Proc, Proc, dict[str, str]]) -> None:
    gateway, prometheus, _ = stack
    with httpx.Client(base_url=prometheus.url, timeout=10) as prom:
        # Every target scraped twice before traffic, so rates see the counters move.
        wait_for(prom, "count(count_over_time(up[1m]) >= 2)", 3)
        sent = asyncio.run(send_load(gateway.url))
        assert sum(sent.values()) == REQUESTS

        # Every request counted exactly once, per class, once a scrape after the load has landed.
        wait_for(prom, "sum(higgs_gateway_requests_total)", REQUESTS)
        for sla_class, count in sent.items():
            wait_for(prom, f'sum(higgs_gateway_requests_total{{sla_class="{sla_class}", status="200"}})', count)
        time.sleep(2.5)  # two more scrapes: rate windows hold the final counts twice
        # Transcripts land seconds after their streams, one at a time from the recogniser's child
        # process; a WER series born with one observation has no rate, so wait for a second one.
        wait_until_positive(prom, "max(increase(higgs_gateway_quality_wer_count[30s]))", timeout=90.0)

        missing = [
            name for name in (*GATEWAY_SERIES, *WORKER_SERIES) if not query(prom, f'count({{__name__="{name}"}})')
        ]
        assert not missing, f"series absent from Prometheus: {missing}"
        audio = query(prom, "sum(rate(higgs_gateway_audio_seconds_total[30s]))")
        assert float(audio[0]["value"][1]) > 0

        failures = []
        checked = 0
        for name in DASHBOARD_FILES:
            for title, expr in panel_queries(load_dashboard(name)):
                try:
                    # Data means a number: NaN (0/0, a quantile of no events) is an empty panel.
                    if not finite(query(prom, expand(expr))):
                        failures.append(f"{name} / {title}: no data: {expand(expr)}")
                except AssertionError as exc:
                    failures.append(f"{name} / {title}: {exc}")
                checked += 1
        assert checked > 40
        assert not failures, "\n".join(failures)

        rules = prom.get("/api/v1/rules").json()["data"]["groups"]
        broken = [(r["name"], r.get("lastError")) for g in rules for r in g["rules"] if r.get("health") == "err"]
        assert rules and not broken, broken
