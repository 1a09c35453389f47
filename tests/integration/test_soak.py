"""Reliability, overload: a bounded soak through a real gateway, the same checks as the
committed benchmark (``gateway/bench/soak.py``, results in docs/benchmarks/soak.md).

300 steady requests at concurrency 32 (classes and output forms mixed, every 25th client
leaving mid-stream) with two bursts of 128 simultaneous requests on top, past the fleet's
68 slots and the admission queues. It must hold: no failure of any kind, every refusal a
429/503 with ``Retry-After`` and the error envelope, every accepted clip complete and
exactly the emulator's length for its text, every counter back to zero when the load
stops (after each half), gateway memory flat from the first half to the second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gateway.bench.soak import SoakPlan, emulator_model, expected_pcm_bytes as soak_expected_bytes, run_soak
from tests.integration.conftest import LONG_TEXT, SHORT_TEXT, worker_pcm
from tests.integration.reliability_support import expected_pcm_bytes, log_records
from tests.support.stack import ADMIN_TOKEN, Stack, running_stack

# The soak's own gateway settings: small queues and short waits, so bursts overflow for real.
EXTRA = {
    "admission": {
        "queue_size": {"latency": 16, "balanced": 64, "throughput": 64},
        "max_wait_s": {"latency": 0.5, "balanced": 2.0, "throughput": 5.0},
    },
}
PLAN = SoakPlan(requests=300, concurrency=32, burst_size=128, bursts=2, abandon_every=25, max_chars=250, seed=11)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(
        tmp_path_factory.mktemp("overload"), 1, 1, time_scale=0.02, extra=EXTRA, worker_args=["--warm"]
    ) as running:
        yield running


def test_expected_length_matches_a_worker(stack: Stack) -> None:
    """The length the soak checks against is what a worker really produces."""
    model = emulator_model()
    worker = stack.workers["high_throughput"][0].url
    over_the_cap = " ".join([SHORT_TEXT] * 25)
    for text in ("Hi.", SHORT_TEXT, LONG_TEXT, over_the_cap):
        produced = len(worker_pcm(worker, text))
        assert produced == expected_pcm_bytes(text) == soak_expected_bytes(text, model), (text[:40], produced)


def test_bounded_soak_with_bursts_past_capacity(stack: Stack) -> None:
    worker_urls = [proc.url for procs in stack.workers.values() for proc in procs]
    report = asyncio.run(run_soak(stack.url, stack.gateway.popen.pid, worker_urls, PLAN, ADMIN_TOKEN))
    failed = [f"{c.name}: {c.detail}" for c in report.checks if not c.passed]
    examples = [f"{o.phase} {o.sla_class} {o.form} {o.status}: {o.detail}" for o in report.failures()[:5]]
    assert report.passed, f"soak checks failed: {failed}; first failures: {examples}; counts {report.counts()}"
    counts = report.counts()
    assert counts.get("ok", 0) >= PLAN.requests // 2, f"most steady requests are served: {counts}"
    assert counts.get("abandoned", 0) >= 1, counts
    errors = [r for r in log_records(stack.gateway.log()) if r.get("level") == "ERROR"]
    assert not errors, f"the gateway logged errors under load: {errors[:3]}"
