"""Load accounting of a real emulator process: queueing, disconnects, lazy graphs, slow start."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.support.procs import Proc, emulator_args, free_port, running_emulator, stop_process

MODEL = "bosonai/higgs-audio-v3-tts-4b"
LONG_TEXT = "This sentence goes on and on so that the clip lasts for a good long while. " * 30  # capped at ~82 s


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name)}{{{re.escape(labels)}[^}}]*}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


class Worker:
    def __init__(self, proc: Proc) -> None:
        self.url = proc.url
        self.http = httpx.Client(base_url=proc.url, timeout=30)

    def load(self) -> int:
        return self.http.get("/load").json()["server_load"]

    def metrics(self) -> str:
        return self.http.get("/metrics").text

    def running_waiting(self) -> tuple[float, float]:
        text = self.metrics()
        return (
            metric(text, "vllm_omni:num_requests_running", f'model_name="{MODEL}"'),
            metric(text, "vllm_omni:num_requests_waiting", f'model_name="{MODEL}"'),
        )


@pytest.fixture(scope="module")
def real_time_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    # Real-time speed and two slots: an 82 s clip would take ~20 s, so anything that frees
    # within a few seconds was freed by the disconnect, not by finishing.
    extra = ["--stage-overrides", '{"0": {"max_num_seqs": 2}}']
    with running_emulator(tmp_path_factory.mktemp("load"), time_scale=1.0, extra=extra) as proc:
        worker = Worker(proc)
        yield worker
        worker.http.close()


def test_disconnects_free_running_and_waiting_slots(real_time_worker: Worker) -> None:
    worker = real_time_worker
    body = {"input": LONG_TEXT, "stream_format": "audio", "response_format": "pcm"}
    with ExitStack() as streams:
        responses = []
        for _ in range(3):
            client = streams.enter_context(httpx.Client(base_url=worker.url, timeout=30))
            responses.append(streams.enter_context(client.stream("POST", "/v1/audio/speech", json=body)))
        assert all(r.status_code == 200 for r in responses)
        assert wait_for(lambda: worker.running_waiting() == (2.0, 1.0)), worker.running_waiting()
        assert worker.load() == 3
        text = worker.metrics()
        assert metric(text, "vllm:num_requests_running", f'model_name="{MODEL}",replica="0",stage="0"') == 2
        assert metric(text, "vllm:num_requests_waiting", f'model_name="{MODEL}",replica="0",stage="0"') == 1
        first = next(responses[0].iter_raw())
        assert len(first) == 1920
    # All three clients are gone: slots, queue and load are back to zero at once.
    assert wait_for(lambda: worker.load() == 0 and worker.running_waiting() == (0.0, 0.0), timeout=8.0)
    aborted = metric(worker.metrics(), "vllm_omni:speech_stream_aborted_total", f'model_name="{MODEL}",reason="cancelled"')
    assert aborted == 3


def test_a_whole_file_client_that_leaves_frees_its_slot(real_time_worker: Worker) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{real_time_worker.url}/v1/audio/speech", json={"input": LONG_TEXT}, timeout=httpx.Timeout(30, read=1.0))
    assert wait_for(lambda: real_time_worker.load() == 0 and real_time_worker.running_waiting() == (0.0, 0.0), timeout=8.0)


def test_high_throughput_worker_captures_graphs_lazily(tmp_path: Path) -> None:
    with running_emulator(tmp_path, profile="higgs_multimodal_qwen3_high_throughput.yaml", time_scale=0.02) as proc:
        worker = Worker(proc)
        assert worker.http.get("/emulator/info").json()["lazy_graph_captured_batch_sizes"] == []
        assert "higgs_emulator_graph_captures_total{" not in worker.metrics()
        assert worker.http.post("/v1/audio/speech", json={"input": "Warm me up.", "response_format": "pcm"}).status_code == 200
        assert metric(worker.metrics(), "higgs_emulator_graph_captures_total", 'batch_size="1"') == 1
        assert worker.http.post("/v1/audio/speech", json={"input": "Again.", "response_format": "pcm"}).status_code == 200
        assert metric(worker.metrics(), "higgs_emulator_graph_captures_total", 'batch_size="1"') == 1  # once per size
        assert metric(worker.metrics(), "higgs_emulator_decode_steps_total", 'batch_size="1"') > 0
        info = worker.http.get("/emulator/info").json()
        assert info["lazy_graph_captured_batch_sizes"] == [1] and info["max_num_seqs"] == 64
        worker.http.close()


def test_startup_delay_refuses_connections_until_ready(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/health"
    args = emulator_args(port, extra=["--startup-delay", "3", "--voices-dir", str(tmp_path / "voices")])
    log = (tmp_path / "slow.log").open("wb")
    launched = time.monotonic()
    popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    refused = 0
    try:
        while time.monotonic() - launched < 60:
            assert popen.poll() is None, (tmp_path / "slow.log").read_text()
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    break
            except httpx.ConnectError:
                refused += 1
            time.sleep(0.1)
        ready_after = time.monotonic() - launched
    finally:
        stop_process(popen)
        log.close()
    assert refused > 0
    assert ready_after >= 3.0
