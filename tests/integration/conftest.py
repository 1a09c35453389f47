"""Helpers shared by the gateway and routing integration tests (real processes, real sockets).

Plain functions, imported by the test modules: what a worker produced, what the gateway
reports about its pools, decoding audio, sampling a worker's load while a test runs.
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import httpx

from tests.support.procs import Proc, emulator_args, running
from tests.support.stack import ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
BYTES_PER_SECOND = 48_000  # 24 kHz, mono, s16le
# ~4 s of audio with the emulator's 15 characters per second: quick at small time scales.
SHORT_TEXT = "The quick brown fox jumps over the lazy dog near the quiet river bank."
# ~30 s of audio: at time scale 0.1 a request lasts a few wall seconds, long enough to overlap.
LONG_TEXT = " ".join([SHORT_TEXT] * 6)


def speech_body(text: str = SHORT_TEXT, **fields: Any) -> dict[str, Any]:
    return {"model": "tts-1", "voice": "alloy", "input": text, **fields}


def worker_pcm(worker_url: str, text: str, **fields: Any) -> bytes:
    """The raw PCM a worker produces for ``text``, asked directly (the reference audio)."""
    body = {"input": text, "response_format": "pcm", "stream_format": "audio", **fields}
    response = httpx.post(f"{worker_url}/v1/audio/speech", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.content


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, message: str = "", interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``message`` otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s: {message} (last: {last!r})")


def pools(gateway_url: str) -> dict[str, Any]:
    response = httpx.get(f"{gateway_url}/admin/pools", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["pools"]


def worker_entry(gateway_url: str, worker_url: str) -> dict[str, Any]:
    """The gateway's view of the worker at ``worker_url`` (from ``GET /admin/pools``)."""
    for pool in pools(gateway_url).values():
        for worker in pool["workers"]:
            if worker["url"] == worker_url.rstrip("/"):
                return worker
    raise AssertionError(f"worker {worker_url} not in the gateway's pools")


def worker_id(gateway_url: str, worker_url: str) -> str:
    return str(worker_entry(gateway_url, worker_url)["id"])


def total_inflight(gateway_url: str) -> int:
    return sum(pool["inflight"] for pool in pools(gateway_url).values())


def worker_load(worker_url: str) -> int:
    return int(httpx.get(f"{worker_url}/load", timeout=10).json()["server_load"])


def set_faults(worker_url: str, **faults: Any) -> dict[str, Any]:
    response = httpx.post(f"{worker_url}/emulator/faults", json=faults, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def wait_idle(gateway_url: str, worker_urls: list[str], timeout: float = 30.0) -> None:
    """Until the gateway holds no lease and no worker counts a request in flight."""
    wait_until(
        lambda: total_inflight(gateway_url) == 0 and all(worker_load(url) == 0 for url in worker_urls),
        timeout,
        "gateway in-flight and worker /load back to 0",
    )


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` (Prometheus text)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, _, value = line.rpartition(" ")
        series_name, _, label_text = series.partition("{")
        if series_name != name:
            continue
        if all(f'{key}="{val}"' in label_text for key, val in labels.items()):
            total += float(value)
    return total


def gateway_metric(gateway_url: str, name: str, **labels: str) -> float:
    return metric(httpx.get(f"{gateway_url}/metrics", timeout=10).text, name, **labels)


@dataclass
class Decoded:
    sample_rate: int
    channels: int
    samples: int
    codec: str

    @property
    def duration_s(self) -> float:
        return self.samples / self.sample_rate


def decode(data: bytes, container: str | None = None) -> Decoded:
    """Decode a whole clip with PyAV; ``samples`` counts every decoded sample per channel."""
    with av.open(io.BytesIO(data), mode="r", format=container) as handle:
        stream = handle.streams.audio[0]
        samples = 0
        rate = 0
        channels = 0
        for frame in handle.decode(stream):
            samples += frame.samples
            rate = frame.sample_rate
            channels = len(frame.layout.channels)
        return Decoded(rate, channels, samples, stream.codec_context.name)


class LoadSampler:
    """Samples a worker's ``/load`` and a gateway's per-pool in-flight in a thread."""

    def __init__(self, worker_url: str, gateway_url: str | None = None, interval: float = 0.03) -> None:
        self.worker_url = worker_url
        self.gateway_url = gateway_url
        self.interval = interval
        self.worker_max = 0
        self.gateway_max: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                try:
                    load = int(client.get(f"{self.worker_url}/load").json()["server_load"])
                    self.worker_max = max(self.worker_max, load)
                    if self.gateway_url is not None:
                        body = client.get(f"{self.gateway_url}/admin/pools", headers=ADMIN).json()
                        for name, pool in body["pools"].items():
                            self.gateway_max[name] = max(self.gateway_max.get(name, 0), pool["inflight"])
                except httpx.HTTPError:
                    pass
                self._stop.wait(self.interval)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@contextmanager
def emulator_on_port(tmp_path: Path, port: int, profile: str, time_scale: float, name: str) -> Iterator[Proc]:
    """An emulated worker on a given port (e.g. the port a stopped one used), fresh voices dir."""
    url = f"http://127.0.0.1:{port}"
    args = emulator_args(port, profile, time_scale, ["--voices-dir", str(tmp_path / f"{name}-voices")])
    with running(args, f"{url}/health", tmp_path / f"{name}.log", url) as proc:
        yield proc


@dataclass
class Routed:
    """Where one streamed speech request went and how much audio came back."""

    status: int
    pool: str | None
    reason: str | None
    audio_bytes: int


async def speak(
    client: httpx.AsyncClient,
    url: str,
    text: str,
    sla_class: str = "balanced",
    headers: dict[str, str] | None = None,
) -> Routed:
    """One streamed PCM request through the gateway, read to the end."""
    all_headers = {"x-sla-class": sla_class, **(headers or {})}
    async with client.stream(
        "POST", f"{url}/v1/audio/speech", json=speech_body(text, response_format="pcm"), headers=all_headers
    ) as response:
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
        return Routed(
            response.status_code, response.headers.get("x-gateway-pool"), response.headers.get("x-gateway-route-reason"), size
        )



# The line the emulator logs for each speech request: what reached the worker.
WORKER_LINE = re.compile(r"speech request x-request-id=(\S+) traceparent=(\S+) tracestate=(\S+)")


def worker_saw(workers: list[Proc], request_id: str) -> tuple[str, str]:
    """(traceparent, tracestate) a worker logged for the request with ``request_id``."""

    def find() -> tuple[str, str] | None:
        for worker in workers:
            for match in WORKER_LINE.finditer(worker.log()):
                if match.group(1) == request_id:
                    return match.group(2), match.group(3)
        return None

    result: tuple[str, str] = wait_until(find, 10, f"a worker logging x-request-id={request_id}")
    return result


@contextmanager
def serving_in_thread(app: Any, port: int, stop_within_s: float = 60) -> Iterator[str]:
    """``app`` under uvicorn on 127.0.0.1:``port`` in a thread of this process, for tests that
    hand it objects a separate process could not share (a tracer, a held mix); its URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, name="gateway", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 60, "gateway started")
        assert server.started, "the gateway did not start (see the captured log)"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(stop_within_s)
        assert not thread.is_alive(), "the gateway did not stop"
