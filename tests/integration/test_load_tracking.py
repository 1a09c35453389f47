"""A worker started without --enable-server-load-tracking answers /load with 0 forever
(as vLLM's does): the gateway must notice and read that worker's load from /metrics."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import LONG_TEXT, gateway_metric, speech_body, wait_until, worker_entry
from tests.support.procs import free_port, running_emulator
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway

FALLBACKS = "higgs_gateway_load_tracking_fallbacks_total"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    with ExitStack() as stack:
        # Real time: a long clip keeps its request in flight across several load polls.
        untracked = stack.enter_context(running_emulator(tmp_path, LL_PROFILE, 1.0, name="ll", load_tracking=False))
        tracked = stack.enter_context(running_emulator(tmp_path, HT_PROFILE, 0.05, name="ht"))
        config = gateway_config(tmp_path, [untracked.url], [tracked.url], free_port())
        gateway = stack.enter_context(running_gateway(tmp_path, config))
        yield gateway.url, untracked.url, tracked.url


def test_a_worker_without_load_tracking_is_read_from_metrics(stack: tuple[str, str, str]) -> None:
    gateway, untracked, tracked = stack
    assert httpx.get(f"{untracked}/load").json() == {"server_load": 0}
    assert worker_entry(gateway, untracked)["load_source"] == "load"
    stop = threading.Event()

    def keep_one_stream_open() -> None:
        body = speech_body(LONG_TEXT, response_format="pcm")
        while not stop.is_set():
            with httpx.stream("POST", f"{gateway}/v1/audio/speech", json=body, headers={"x-sla-class": "latency"}, timeout=60) as response:
                for _ in response.iter_raw():
                    if stop.is_set():
                        break

    client = threading.Thread(target=keep_one_stream_open, daemon=True)
    client.start()
    try:
        wait_until(
            lambda: worker_entry(gateway, untracked)["load_source"] == "metrics",
            timeout=30,
            message="the gateway never noticed that /load stays 0 while its request runs there",
        )
    finally:
        stop.set()
        client.join(timeout=60)
    assert gateway_metric(gateway, FALLBACKS, pool="low_latency") == 1
    assert gateway_metric(gateway, FALLBACKS, pool="high_throughput") == 0
    assert worker_entry(gateway, tracked)["load_source"] == "load"
