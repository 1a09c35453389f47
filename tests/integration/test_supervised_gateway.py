"""Supervised pools through the whole gateway: ``higgs-gateway serve --config`` as a real
process whose pools say ``launch:``, with the emulator started through vllm-omni's own
flags (plus ``--time-scale``). What a client and an operator see over real sockets:
warm-up before routing, a killed worker restarted with its voices, a worker that never
starts reported failed, and a SIGTERM that finishes in-flight streams and leaves no
worker behind. (Supervisor-level behaviour is in test_supervisor.py.)
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from gateway.supervisor.process import group_alive
from tests.integration.conftest import (
    ADMIN,
    LONG_TEXT,
    SHORT_TEXT,
    gateway_metric,
    metric,
    pools,
    speech_body,
    wait_until,
    worker_pcm,
)
from tests.integration.supervisor_support import alive
from tests.support.audio import reference_wav
from tests.support.procs import Proc, free_port
from tests.support.stack import gateway_config, running_gateway

pytestmark = pytest.mark.timeout(180)

LL, HT = "low_latency", "high_throughput"
REQUESTS = "higgs_gateway_requests_total"
EJECTIONS = "higgs_gateway_worker_ejections_total"
HT_DEFAULT_SIZES = [1, 2, 4, 8, 16, 32, 64]


# ---- config -------------------------------------------------------------------------------
def emulator_command(time_scale: float, *extra: str) -> list[str]:
    """vllm-omni serve's flags plus the emulator's time scale (as gateway.demo does). No
    --voices-dir: each worker process gets a fresh, empty voice store, like a real worker."""
    return [
        sys.executable, "-m", "gateway", "emulate", "{model}", "--omni", "--trust-remote-code",
        "--deploy-config", "{profile}", "--host", "{host}", "--port", "{port}",
        "--served-model-name", "{served_model_name}", "--log-stats", "--enable-server-load-tracking",
        "--time-scale", str(time_scale), *extra,
    ]  # fmt: skip


def launch(command: list[str], **settings: Any) -> dict[str, Any]:
    return {
        "gpus": ["0"],
        "command": command,
        "start_timeout_s": 60.0,
        "stop_timeout_s": 10.0,
        "restart_backoff_initial_s": 0.2,
        "restart_backoff_max_s": 1.0,
        **settings,
    }


def supervised_config(
    tmp_path: Path, ll_launch: dict[str, Any], ht_launch: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    config = gateway_config(tmp_path, [], [], free_port(), extra)
    # A worker's scratch voice store is a temporary directory: keep those of SIGKILLed
    # workers (never cleaned up) inside the test's own directory.
    scratch = tmp_path / "worker-tmp"
    scratch.mkdir(exist_ok=True)
    for pool, settings in ((LL, ll_launch), (HT, ht_launch)):
        del config["pools"][pool]["workers"]
        config["pools"][pool]["launch"] = {**settings, "env": {"TMPDIR": str(scratch)}}
    return config


# ---- processes, seen from outside the gateway --------------------------------------------
def _stat_fields(pid: int) -> list[str]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()  # [state, ppid, pgrp, ...]


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (any address), from /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def listening(port: int) -> bool:
    return bool(listening_inodes(port))


def listener_pids(port: int) -> set[int]:
    """Processes holding a socket that listens on ``port`` (what ``ss -ltnp`` shows)."""
    targets = {f"socket:[{inode}]" for inode in listening_inodes(port)}
    found: set[int] = set()
    if not targets:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
            if any(os.readlink(f"/proc/{name}/fd/{fd}") in targets for fd in fds):
                found.add(int(name))
        except OSError:
            continue
    return found


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def gateway_worker_pid(gateway: Proc, url: str) -> int:
    """The gateway's child that listens on the worker's port."""
    pids = [pid for pid in listener_pids(port_of(url)) if int(_stat_fields(pid)[1]) == gateway.popen.pid]
    assert len(pids) == 1, f"expected one child of the gateway listening on {url}, got {pids}"
    return pids[0]


def children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if int(_stat_fields(int(name))[1]) == pid:
                    found.append(int(name))
            except OSError:
                continue
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def group_members(pgids: set[int]) -> set[int]:
    """Live (non-zombie) processes in any of these process groups."""
    found = set()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = _stat_fields(int(name))
        except OSError:
            continue
        if int(fields[2]) in pgids and fields[0] != "Z":
            found.add(int(name))
    return found


# ---- the gateway's view -----------------------------------------------------------------
def config_data_dir(gateway: Proc) -> str:
    document = httpx.get(f"{gateway.url}/admin/config", headers=ADMIN, timeout=10).json()
    return str(document["data_dir"])


def the_worker(gateway_url: str, pool: str) -> dict[str, Any]:
    workers = pools(gateway_url)[pool]["workers"]
    assert len(workers) == 1, workers
    return workers[0]


def ready_body(gateway_url: str, require: str | None = None) -> tuple[int, dict[str, Any]]:
    params = {"require": require} if require else None
    response = httpx.get(f"{gateway_url}/ready", params=params, timeout=10)
    return response.status_code, response.json()


def speak(gateway_url: str, sla: str, **fields: Any) -> httpx.Response:
    body = speech_body(SHORT_TEXT, response_format="pcm", **fields)
    return httpx.post(f"{gateway_url}/v1/audio/speech", json=body, headers={"x-sla-class": sla}, timeout=60)


def worker_voice_names(worker_url: str) -> set[str]:
    response = httpx.get(f"{worker_url}/v1/audio/voices", timeout=10)
    assert response.status_code == 200, response.text
    return {v["name"] for v in response.json()["uploaded_voices"]}


def captures(worker_url: str) -> dict[int, float]:
    text = httpx.get(f"{worker_url}/metrics", timeout=10).text
    found = re.findall(r'^higgs_emulator_graph_captures_total\{batch_size="(\d+)"\} ([0-9.e+]+)$', text, re.M)
    return {int(size): float(value) for size, value in found}


# ---- 1 + 2: one gateway, warmed at start, then a worker killed --------------------------
@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """LL fast (0.05); HT at 0.5 so each default warm-up burst (up to 64) really runs as
    one batch: at tiny time scales requests finish before a 64-burst has fully arrived."""
    tmp_path = tmp_path_factory.mktemp("supervised")
    config = supervised_config(
        tmp_path,
        launch(emulator_command(0.05)),
        launch(emulator_command(0.5)),  # warm-up: the pool's default sizes
        # `throughput` never takes low-latency places here (that worker runs 10x faster), so
        # each class names its own pool.
        routing={"thresholds": {"reserve_for_latency": 16, "adaptive_latency_reserve": False}},
    )
    with running_gateway(tmp_path, config, wait_ready=False) as gateway:
        # /ready waits for warm-up; wait_routable's 60 s budget is not enough on 2 busy cores.
        # Both pools: one warm pool alone is enough for /ready (degraded).
        wait_until(lambda: ready_body(gateway.url, "every_pool")[0] == 200, 120, "gateway /ready, every pool")
        yield gateway


def test_workers_start_warm_up_become_routable_and_serve(warmed: Proc) -> None:
    status, body = ready_body(warmed.url)
    assert status == 200 and body["routable_workers"] == {LL: 1, HT: 1} and body["empty_pools"] == [], body
    ll, ht = the_worker(warmed.url, LL), the_worker(warmed.url, HT)
    for worker, pool in ((ll, LL), (ht, HT)):
        assert worker["id"] == f"{pool}-0"
        assert worker["state"] == "ready" and worker["routable"] and worker["managed"], worker
        # The gateway started it: a child of the gateway process listens on the worker's port.
        gateway_worker_pid(warmed, worker["url"])

    # The HT worker saw every default warm-up size as a decode batch...
    seen = captures(ht["url"])
    assert all(seen.get(size, 0) >= 1 for size in HT_DEFAULT_SIZES), seen
    ht_metrics = httpx.get(f"{ht['url']}/metrics", timeout=10).text
    assert metric(ht_metrics, "vllm_omni:requests_success_total", finished_reason="stop") >= sum(HT_DEFAULT_SIZES)
    ll_metrics = httpx.get(f"{ll['url']}/metrics", timeout=10).text
    assert metric(ll_metrics, "vllm_omni:requests_success_total", finished_reason="stop") >= 1
    # ...and none of those requests is gateway traffic.
    assert gateway_metric(warmed.url, REQUESTS) == 0

    for sla, pool in (("latency", LL), ("throughput", HT)):
        response = speak(warmed.url, sla)
        assert response.status_code == 200, response.text
        assert response.headers["x-gateway-pool"] == pool, response.headers.get("x-gateway-route-reason")
        assert len(response.content) > 48_000  # more than a second of 24 kHz s16le
    assert gateway_metric(warmed.url, REQUESTS) == 2
    assert gateway_metric(warmed.url, REQUESTS, status="200") == 2


def test_killed_worker_is_restarted_and_routable_again_with_its_voices(warmed: Proc) -> None:
    upload = httpx.post(
        f"{warmed.url}/v1/audio/voices",
        data={"name": "narrator", "consent": "true"},
        files={"audio_sample": ("narrator.wav", reference_wav(), "audio/wav")},
        timeout=60,
    )
    assert upload.status_code == 200, upload.text
    worker = the_worker(warmed.url, LL)
    url = worker["url"]
    assert "narrator" in worker_voice_names(url)
    ejections = gateway_metric(warmed.url, EJECTIONS, pool=LL, reason="process_exit")
    old_pid = gateway_worker_pid(warmed, url)

    os.kill(old_pid, signal.SIGKILL)
    wait_until(lambda: not alive(old_pid), 30, "killed worker gone")
    wait_until(
        lambda: gateway_metric(warmed.url, EJECTIONS, pool=LL, reason="process_exit") == ejections + 1,
        30,
        "process_exit ejection counted",
    )

    # Until it is ready again, poll the gateway first and the worker second: whenever the
    # gateway calls it ready, the restarted (empty) worker must already list the voice.
    states: list[str] = []
    while True:
        entry = wait_until(lambda: the_worker(warmed.url, LL), 5)
        states.append(entry["state"])
        if entry["state"] == "ready":
            assert "narrator" in worker_voice_names(url), "routable before its voices were replayed"
            break
        assert entry["state"] == "starting" and not entry["routable"], entry
        assert len(states) < 2000, f"not ready again: {entry}"
        threading.Event().wait(0.05)
    assert states[0] == "starting", states  # the gateway saw the exit before it routed again
    assert entry["url"] == url and entry["managed"]

    new_pid = gateway_worker_pid(warmed, url)
    assert new_pid != old_pid
    response = speak(warmed.url, "latency", voice="narrator")
    assert response.status_code == 200, response.text
    assert response.headers["x-gateway-pool"] == LL and response.content
    assert gateway_metric(warmed.url, EJECTIONS, pool=LL, reason="process_exit") == ejections + 1
    assert gateway_metric(warmed.url, EJECTIONS, pool=HT) == 0
    log_text = (Path(config_data_dir(warmed)) / "logs" / "low_latency-0.log").read_text(errors="replace")
    assert "exited with code -9" in log_text


# ---- 3: a worker that never answers ------------------------------------------------------
def test_worker_that_never_answers_is_failed_while_the_other_pool_serves(tmp_path: Path) -> None:
    config = supervised_config(
        tmp_path,
        launch(emulator_command(0.05, "--startup-delay", "1000"), start_timeout_s=3.0, stop_timeout_s=5.0),
        launch(emulator_command(0.05), warmup={"batch_sizes": [1, 2]}),
    )
    with running_gateway(tmp_path, config, wait_ready=False) as gateway:
        entry = wait_until(
            lambda: (w := the_worker(gateway.url, LL))["state"] == "failed" and w, 60, "low-latency worker failed"
        )
        assert not entry["routable"] and entry["managed"]
        assert "start timeout" in (entry["last_error"] or ""), entry
        wait_until(lambda: the_worker(gateway.url, HT)["state"] == "ready", 60, "high-throughput worker ready")

        # Ready but degraded: high-throughput serves every class; strictly, not ready.
        status, body = ready_body(gateway.url)
        assert status == 200 and body["status"] == "degraded", body
        assert body["empty_pools"] == [LL] and body["routable_workers"] == {LL: 0, HT: 1}, body
        assert ready_body(gateway.url, "every_pool")[0] == 503
        # Stopped for good: nothing listens on its port (the process that never opened one
        # is gone too: no child of the gateway is left with the worker's --port).
        assert not listening(port_of(entry["url"]))
        port_arg = f"--port\0{port_of(entry['url'])}\0"
        assert not [pid for pid in children(gateway.popen.pid) if port_arg in cmdline(pid)]

        for sla in ("balanced", "throughput", "latency"):
            response = speak(gateway.url, sla)
            assert response.status_code == 200, (sla, response.text)
            assert response.headers["x-gateway-pool"] == HT and response.content
        assert the_worker(gateway.url, LL)["state"] == "failed"  # never restarted


# ---- 4: SIGTERM to the gateway ------------------------------------------------------------
@dataclass
class Stream:
    sla: str
    first_byte: threading.Event = field(default_factory=threading.Event)
    audio: bytearray = field(default_factory=bytearray)
    status: int | None = None
    pool: str | None = None
    error: BaseException | None = None


def stream_speech(gateway_url: str, stream: Stream) -> None:
    body = speech_body(LONG_TEXT, response_format="pcm", stream_format="audio")
    try:
        with httpx.Client(timeout=httpx.Timeout(60, connect=10)) as client:
            url, headers = f"{gateway_url}/v1/audio/speech", {"x-sla-class": stream.sla}
            with client.stream("POST", url, json=body, headers=headers) as response:
                stream.status, stream.pool = response.status_code, response.headers.get("x-gateway-pool")
                for chunk in response.iter_bytes():
                    stream.audio += chunk
                    stream.first_byte.set()
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        stream.error = exc
    finally:
        stream.first_byte.set()


@contextmanager
def streaming(gateway_url: str, slas: list[str]) -> Iterator[list[Stream]]:
    streams = [Stream(sla) for sla in slas]
    threads = [threading.Thread(target=stream_speech, args=(gateway_url, s), daemon=True) for s in streams]
    for thread in threads:
        thread.start()
    try:
        yield streams
    finally:
        for thread in threads:
            thread.join(90)


def test_sigterm_finishes_in_flight_streams_and_leaves_no_worker(tmp_path: Path) -> None:
    # Time scale 0.25: ~30 s of audio per request streams for a few wall seconds.
    config = supervised_config(
        tmp_path,
        launch(emulator_command(0.25)),
        launch(emulator_command(0.25), warmup={"batch_sizes": [1]}),
        server={"shutdown_grace_s": 60},
        routing={"thresholds": {"reserve_for_latency": 16, "adaptive_latency_reserve": False}},  # each class on its own pool
    )
    with running_gateway(tmp_path, config, wait_ready=True) as gateway:
        urls = {pool: the_worker(gateway.url, pool)["url"] for pool in (LL, HT)}
        pids = {pool: gateway_worker_pid(gateway, url) for pool, url in urls.items()}
        # Each worker leads its own process group; collect every member (stage processes).
        pgids = {int(_stat_fields(pid)[2]) for pid in pids.values()}
        assert pgids == set(pids.values())
        members = group_members(pgids)
        assert set(pids.values()) <= members
        reference = worker_pcm(urls[LL], LONG_TEXT)  # the full clip, from the worker itself

        with streaming(gateway.url, ["latency", "latency", "throughput"]) as streams:
            for stream in streams:
                assert stream.first_byte.wait(60), "no audio before SIGTERM"
            assert all(s.error is None and s.audio for s in streams), [s.error for s in streams]
            assert all(len(s.audio) < len(reference) for s in streams), "finished before SIGTERM: use a slower time scale"
            gateway.popen.send_signal(signal.SIGTERM)
        code = gateway.popen.wait(90)

    # uvicorn re-raises the SIGTERM it caught once shutdown is complete: -15 is a clean exit
    # here, as long as the lifespan shutdown (which stops the workers) ran to the end.
    assert code in (0, -signal.SIGTERM), gateway.log()[-4000:]
    assert "Application shutdown complete" in gateway.log(), gateway.log()[-4000:]
    for stream in streams:
        assert stream.error is None, f"{stream.sla}: {stream.error!r}"
        assert stream.status == 200 and stream.pool == (HT if stream.sla == "throughput" else LL)
        assert bytes(stream.audio) == reference, f"{stream.sla}: {len(stream.audio)} of {len(reference)} bytes"
    assert {s.pool for s in streams} == {LL, HT}  # both pools had work in flight

    # The gateway waits for its workers before it exits: nothing is left, at once.
    assert not [pid for pid in members if alive(pid)], f"worker processes outlived the gateway: {members}"
    assert not any(group_alive(pgid) for pgid in pgids)
    for url in urls.values():
        assert not listening(port_of(url)), f"something still listens on {url}"
    log_dir = Path(config["data_dir"]) / "logs"
    for pool in (LL, HT):
        assert "stopped (exit code" in (log_dir / f"{pool}-0.log").read_text(errors="replace")
