"""The fleet planner on a real stack: a gateway process in front of two emulated workers.

Requests sent with the official ``openai`` client (and one SLA header each) are counted at
admission; the planner's background loop judges them, ``GET /admin/planner`` explains the
mix it wants and ``/metrics`` exports it, as an autoscaler reads it.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.integration.conftest import SHORT_TEXT, metric, wait_until
from tests.support.stack import Stack, running_stack

REQUESTS = 8


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    extra = {
        "planner": {
            "interval_s": 0.2,
            # Counts fade with age (smoothing): the last of the requests judges, with room.
            "min_requests": REQUESTS - 2,
            "smoothing_s": 600,
            # latency faster than a high-throughput worker runs even idle: it needs low-latency.
            "objectives": {"latency": {"ttfp_s": 0.5, "rtf": 0.34}},
            "pools": {"high_throughput": {"max": 4}},
        }
    }
    with running_stack(tmp_path_factory.mktemp("planner"), 1, 1, time_scale=0.05, extra=extra) as running:
        yield running


def test_the_planner_judges_what_admission_saw_and_exports_it(stack: Stack) -> None:
    admin = stack.admin_headers
    before = httpx.get(f"{stack.url}/admin/planner", headers=admin, timeout=10).json()
    assert before["judged"] is False and before["desired_workers"] is None
    assert "too little traffic" in before["status"] or "no pass yet" in before["status"]
    assert 'higgs_gateway_desired_workers{pool="low_latency"}' not in httpx.get(f"{stack.url}/metrics", timeout=10).text

    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0, timeout=60)
    for index in range(REQUESTS):
        sla = "latency" if index % 2 == 0 else "throughput"
        audio = client.audio.speech.create(
            model="tts-1", voice="alloy", input=SHORT_TEXT, response_format="pcm", extra_headers={"x-sla-class": sla}
        )
        assert len(audio.content) > 0

    def judged_all() -> dict | None:
        doc = httpx.get(f"{stack.url}/admin/planner", headers=admin, timeout=10).json()
        seen = (doc["inputs"]["arrivals"] or {}).get("requests", 0)
        return doc if doc["judged"] and round(seen) == REQUESTS else None  # a pass after the last request

    judged = wait_until(judged_all, timeout=20, message="the planner never judged all the traffic")
    classes = judged["inputs"]["arrivals"]["classes"]
    assert round(classes["latency"]["requests"]) == REQUESTS // 2 and round(classes["throughput"]["requests"]) == REQUESTS // 2
    assert classes["balanced"]["requests"] == 0
    desired = judged["desired_workers"]
    assert desired["low_latency"] >= 1 and 0 <= desired["high_throughput"] <= 4
    assert judged["plan"]["bound_by"]["low_latency"] == "latency_rtf"
    assert any(c["chosen"] and c["workers"] == desired for c in judged["candidates"])

    text = httpx.get(f"{stack.url}/metrics", timeout=10).text
    for pool, count in desired.items():
        assert metric(text, "higgs_gateway_desired_workers", pool=pool) == count
    assert metric(text, "higgs_gateway_planner_judged") == 1
    assert metric(text, "higgs_gateway_planner_bound_by", pool="low_latency", objective="latency_rtf") == 1
    assert metric(text, "higgs_gateway_planner_arrival_rate", sla_class="latency") > 0
