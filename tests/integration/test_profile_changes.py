"""A GPU changing profile through the whole gateway: two supervised emulated workers (1 LL +
1 HT, each modelling its profile's start-up), a desired mix held past the hold time, and
requests sent all along. The gateway runs in this process under uvicorn so the test can
play the planner (a ``DesiredMix`` it changes while the gateway serves)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from gateway.app import create_app
from gateway.config import load_config
from tests.integration.conftest import ADMIN, SHORT_TEXT, gateway_metric, serving_in_thread, speech_body, wait_until
from tests.integration.test_supervised_gateway import emulator_command, launch, supervised_config

pytestmark = pytest.mark.timeout(300)

LL, HT = "low_latency", "high_throughput"
CHANGES = "higgs_gateway_profile_changes_total"
TIME_SCALE = 0.03  # modelled start-up: LL 151 s -> 4.5 s, HT 90 s -> 2.7 s
HOLD_S = 1.5


class HeldMix:
    """The test's planner: whatever mix it was last told, read from the gateway's loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._desired: dict[str, int] | None = None

    def set(self, desired: dict[str, int] | None) -> None:
        with self._lock:
            self._desired = desired

    def mix_for(self, running: Mapping[str, int]) -> Mapping[str, int] | None:
        with self._lock:
            return self._desired


class Traffic:
    """Requests of both classes, one after another from each of two threads, until stopped."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self.results: list[tuple[str, int, str | None]] = []  # (sla, status, pool)
        self._threads = [threading.Thread(target=self._run, args=(sla,), daemon=True) for sla in ("latency", "throughput")]

    def _run(self, sla: str) -> None:
        body = speech_body(SHORT_TEXT, response_format="pcm")
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                try:
                    response = client.post(f"{self._url}/v1/audio/speech", json=body, headers={"x-sla-class": sla})
                    self.results.append((sla, response.status_code, response.headers.get("x-gateway-pool")))
                except httpx.HTTPError as exc:
                    self.results.append((sla, 0, repr(exc)))

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(90)


@contextmanager
def gateway_in_process(config: dict[str, Any], mix: HeldMix) -> Iterator[str]:
    app = create_app(load_config(None, config), desired_mix=mix)
    with serving_in_thread(app, config["server"]["port"], stop_within_s=90) as url:  # drains supervised workers
        yield url


def fleet(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/admin/fleet", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def routable(body: dict[str, Any]) -> dict[str, list[str]]:
    return {pool: sorted(w["id"] for w in p["workers"] if w["routable"]) for pool, p in body["pools"].items()}


def finished(url: str, count: int) -> list[dict[str, Any]]:
    """Waits until ``count`` changes have finished; returns them, newest first."""
    seen: list[dict[str, Any]] = []

    def done() -> bool:
        seen[:] = fleet(url)["profile_changes"]["recent"]
        return len(seen) >= count

    wait_until(done, 150, f"{count} profile change(s) finished", interval=0.2)
    return seen


def info(worker_url: str) -> dict[str, Any]:
    return httpx.get(f"{worker_url}/emulator/info", timeout=10).json()


def test_a_gpu_moves_to_the_pool_the_held_mix_wants_and_back_without_failing_a_request(tmp_path: Path) -> None:
    command = emulator_command(TIME_SCALE, "--model-startup")
    config = supervised_config(
        tmp_path,
        launch(command, warmup={"batch_sizes": [1]}),
        launch(command, gpus=["1"], warmup={"batch_sizes": [1, 2, 4]}),
        supervisor={"profile_changes": {"enabled": True, "hold_s": HOLD_S, "interval_s": 0.2, "drain_grace_s": 60.0}},
        # Both classes may use either pool, so nothing waits on an empty pool mid-change.
        admission={"max_wait_s": {"latency": 60.0, "balanced": 60.0, "throughput": 60.0}},
    )
    mix = HeldMix()
    with gateway_in_process(config, mix) as url:
        wait_until(lambda: routable(fleet(url)) == {LL: ["low_latency-0"], HT: ["high_throughput-0"]}, 120, "both pools routable")
        start = fleet(url)
        assert start["profile_changes"] == {"enabled": True, "hold_s": HOLD_S, "pending": None, "in_progress": None, "recent": []}
        ll_url = start["pools"][LL]["workers"][0]["url"]
        assert info(ll_url)["decode_graphs"]

        with Traffic(url) as traffic:
            wait_until(lambda: len(traffic.results) >= 4, 60, "traffic flowing")
            # Nothing judged yet: nothing moves however long it lasts.
            time.sleep(3 * HOLD_S)
            assert fleet(url)["profile_changes"]["recent"] == []

            mix.set({LL: 0, HT: 2})
            phases: set[str] = set()

            def moved() -> bool:
                body = fleet(url)
                current = body["profile_changes"]["in_progress"]
                if current is not None:
                    phases.add(current["phase"])
                return bool(body["profile_changes"]["recent"])

            wait_until(moved, 150, "LL -> HT change", interval=0.1)
            (to_ht,) = finished(url, 1)
            assert (to_ht["from_pool"], to_ht["to_pool"], to_ht["result"]) == (LL, HT, "completed"), to_ht
            assert (to_ht["worker"], to_ht["new_worker"], to_ht["gpu"]) == ("low_latency-0", "high_throughput-1", "0")
            assert phases & {"draining", "restarting", "warming"}, phases
            after = fleet(url)
            assert routable(after) == {LL: [], HT: ["high_throughput-0", "high_throughput-1"]}
            moved_worker = next(w for w in after["pools"][HT]["workers"] if w["id"] == "high_throughput-1")
            # Same GPU slot, same port: now the high-throughput profile, warmed at its sizes.
            assert urlsplit(moved_worker["url"]).port == urlsplit(ll_url).port
            log = (Path(config["data_dir"]) / "logs" / "high_throughput-1.log").read_text()
            assert f"starting high_throughput-1 on GPU 0 at {moved_worker['url']}" in log
            ht_info = info(moved_worker["url"])
            assert not ht_info["decode_graphs"] and ht_info["max_num_seqs"] == 64
            assert {1, 2, 4} <= set(ht_info["lazy_graph_captured_batch_sizes"])
            served = len(traffic.results)
            wait_until(lambda: len(traffic.results) >= served + 4, 60, "traffic after the change")

            mix.set({LL: 1, HT: 1})
            (back, _) = finished(url, 2)
            assert (back["from_pool"], back["to_pool"], back["result"]) == (HT, LL, "completed"), back
            assert back["new_worker"] == "low_latency-0"
            assert back["gpu"] == {"high_throughput-0": "1", "high_throughput-1": "0"}[back["worker"]]
            wait_until(lambda: len(routable(fleet(url))[LL]) == 1, 30, "LL routable again")
            (ll_worker,) = fleet(url)["pools"][LL]["workers"]
            assert info(ll_worker["url"])["decode_graphs"]
            served = len(traffic.results)
            wait_until(lambda: len(traffic.results) >= served + 4, 60, "traffic after the second change")

        failed = [r for r in traffic.results if r[1] != 200]
        assert failed == [], failed
        assert len(traffic.results) >= 12
        assert {pool for _, _, pool in traffic.results} == {LL, HT}
        assert gateway_metric(url, CHANGES, from_pool=LL, to_pool=HT, result="completed") == 1
        assert gateway_metric(url, CHANGES, from_pool=HT, to_pool=LL, result="completed") == 1
        assert gateway_metric(url, "higgs_gateway_profile_change_in_progress", from_pool=LL, to_pool=HT) == 0
        assert gateway_metric(url, "higgs_gateway_requests_total", status="200") == len(traffic.results)
