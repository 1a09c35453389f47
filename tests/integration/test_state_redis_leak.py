"""A worker whose /load leaks (counts requests nobody holds) behind a gateway with the fleet
view: the leak is measured and shown in /admin/pools and the metric. (That routing uses the
fleet's exact count instead is tests/unit/pools/test_report_leak.py.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from gateway.pools.report_leak import LEAK_CONFIRM_S
from tests.integration.conftest import gateway_metric, wait_until, worker_entry
from tests.integration.reliability_support import StubBehaviour, StubWorker, _handler
from tests.support.procs import free_port, running_emulator
from tests.support.redis_server import running_redis
from tests.support.stack import HT_PROFILE, gateway_config, running_gateway

LEAKED = 4  # what the released worker's counter keeps after four abandoned requests


@pytest.fixture
def leaky_worker() -> Iterator[StubWorker]:
    stub = StubWorker("", StubBehaviour(speech_status=503))
    base = _handler(stub)

    class Leaky(base):  # type: ignore[misc, valid-type]
        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            if self.path.split("?", 1)[0] != "/load":
                super().do_GET()
                return
            payload = json.dumps({"server_load": LEAKED}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Leaky)
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_leaking_report_is_measured_and_shown(tmp_path: Any, leaky_worker: StubWorker) -> None:
    with running_redis(tmp_path / "redis") as redis, running_emulator(tmp_path, HT_PROFILE, 0.05, name="ht") as ht:
        extra = {"state": {"backend": "redis", "redis_url": redis.url, "key_prefix": "leak-it:"}}
        config = gateway_config(tmp_path, [leaky_worker.url], [ht.url], free_port(), extra)
        with running_gateway(tmp_path, config) as gateway:
            entry = wait_until(
                lambda: (w := worker_entry(gateway.url, leaky_worker.url))["report_leak"] == LEAKED and w,
                LEAK_CONFIRM_S + 20,
                "the leak measured",
            )
            assert entry["report_trusted"] is False and entry["reported_load"] == LEAKED
            assert entry["other_replicas_inflight"] == 0 and entry["inflight"] == 0
            labels = {"pool": "low_latency", "worker": entry["id"]}
            assert gateway_metric(gateway.url, "higgs_gateway_worker_report_leak", **labels) == LEAKED
