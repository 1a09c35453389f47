"""Durability: what the gateway stores (voices, routing overrides, drain state) survives a
restart and a crash right after a write, torn leftovers are ignored, and a voice uploaded
while a worker was down reaches that worker when it returns, even across a gateway crash.

Gateways here are real processes sharing one data directory per test; "crash" is SIGKILL
sent the moment the write's HTTP answer arrived, so nothing after the answer can help.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import ADMIN, emulator_on_port, speech_body, wait_until, worker_entry
from tests.integration.reliability_support import log_records, reference_wav, upload_voice, worker_voices
from tests.support.procs import Proc, free_port, running_emulator
from tests.support.stack import HT_PROFILE, LL_PROFILE, gateway_config, running_gateway, wait_routable

TIME_SCALE = 0.02
EXTRA = {"health": {"interval_s": 0.5, "half_open_after_s": 1.0, "eject_after_failures": 2}}
PATCH = {"policy": "least_loaded", "thresholds": {"balanced_threshold": 7, "reserve_for_latency": 1}}


@dataclass
class Workers:
    ll: Proc
    ht: Proc


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    tmp = tmp_path_factory.mktemp("durability-workers")
    with (
        running_emulator(tmp, LL_PROFILE, TIME_SCALE, name="ll") as ll,
        running_emulator(tmp, HT_PROFILE, TIME_SCALE, name="ht") as ht,
    ):
        yield Workers(ll, ht)


def config_for(data_root: Path, workers: Workers) -> dict[str, Any]:
    """A fresh port each start, the same data directory (``data_root/gateway-data``)."""
    return gateway_config(data_root, [workers.ll.url], [workers.ht.url], free_port(), EXTRA)


def start(data_root: Path, workers: Workers, name: str) -> Any:
    return running_gateway(data_root, config_for(data_root, workers), name=name, wait_ready=False)


def crash_or_stop(gateway: Proc, how: str) -> None:
    if how == "kill -9":
        gateway.popen.kill()
        gateway.popen.wait(10)
    else:
        gateway.stop()  # SIGTERM; uvicorn re-raises it after a clean shutdown (exit -15)
        assert gateway.popen.returncode in (0, -15), f"graceful stop failed:\n{gateway.log()[-3000:]}"
        assert "Application shutdown complete" in gateway.log()


def routing(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/admin/routing", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def voice_ids(url: str) -> set[str]:
    return {v["id"] for v in httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["voices"] if v["type"] == "uploaded"}


def assert_state_restored(url: str, workers: Workers, voice: str) -> None:
    assert voice in voice_ids(url), "the voice survived"
    current = routing(url)
    assert current["policy"] == "least_loaded", current
    assert current["thresholds"]["balanced_threshold"] == 7 and current["thresholds"]["reserve_for_latency"] == 1, current
    ht = worker_entry(url, workers.ht.url)
    assert ht["drained"] is True and not ht["routable"], f"the drain survived: {ht}"
    wait_routable(url, {"low_latency": 1})
    response = httpx.post(
        f"{url}/v1/audio/speech",
        json=speech_body(voice=voice, response_format="pcm"),
        headers={"x-sla-class": "throughput"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-gateway-pool"] == "low_latency", "the drained worker takes nothing new"


@pytest.mark.parametrize("how", ["graceful stop", "kill -9"])
def test_voices_thresholds_and_drain_survive_a_restart(workers: Workers, tmp_path: Path, how: str) -> None:
    voice = "keeper-" + how.split()[0]
    with start(tmp_path, workers, "first") as first:
        wait_routable(first.url, {"low_latency": 1, "high_throughput": 1})
        upload_voice(first.url, voice)
        assert httpx.patch(f"{first.url}/admin/routing", headers=ADMIN, json=PATCH, timeout=10).status_code == 200
        ht_id = worker_entry(first.url, workers.ht.url)["id"]
        drained = httpx.post(f"{first.url}/admin/workers/{ht_id}/drain", headers=ADMIN, timeout=10)
        assert drained.status_code == 200, drained.text
        crash_or_stop(first, how)  # the moment the last write answered

    with start(tmp_path, workers, "second") as second:
        assert_state_restored(second.url, workers, voice)
        assert httpx.post(f"{second.url}/admin/workers/{ht_id}/undrain", headers=ADMIN, timeout=10).status_code == 200
        assert httpx.delete(f"{second.url}/v1/audio/voices/{voice}", timeout=30).status_code == 200


def test_torn_and_unreadable_files_are_ignored(workers: Workers, tmp_path: Path) -> None:
    voice = "committed"
    with start(tmp_path, workers, "first") as first:
        wait_routable(first.url, {"low_latency": 1, "high_throughput": 1})
        upload_voice(first.url, voice)
        assert httpx.patch(f"{first.url}/admin/routing", headers=ADMIN, json=PATCH, timeout=10).status_code == 200
        ht_id = worker_entry(first.url, workers.ht.url)["id"]
        assert httpx.post(f"{first.url}/admin/workers/{ht_id}/drain", headers=ADMIN, timeout=10).status_code == 200
        first.popen.kill()
        first.popen.wait(10)

    data = tmp_path / "gateway-data"
    # What a crash in the middle of each write leaves behind (the renames never happened).
    staging = data / "voices" / ".tmp-0123456789abcdef"
    staging.mkdir()
    (staging / "audio.wav").write_bytes(reference_wav()[:5000])  # half the audio, no meta.json
    (data / ".routing.json.k3j4h5.tmp").write_text('{"policy": "round_rob')
    (data / "drained.tmp").write_text('["low_latency-')
    # A voice directory whose files do not agree (never produced by the gateway's own writes).
    broken = data / "voices" / "broken-voice"
    broken.mkdir()
    (broken / "audio.wav").write_bytes(reference_wav())
    (broken / "meta.json").write_text('{"name": "broken-voice", "created_at": 1, "mime_ty')

    with start(tmp_path, workers, "second") as second:
        assert_state_restored(second.url, workers, voice)
        assert voice_ids(second.url) == {voice}, "no torn or broken voice is listed"
        # Replay pushed the committed voice, and nothing torn, to the workers.
        assert "broken-voice" not in worker_voices(workers.ll.url)
        assert not any(name.startswith(".") for name in worker_voices(workers.ll.url))
        second.popen.kill()
        second.popen.wait(10)

    # The committed files themselves damaged (a disk problem, an operator's editor): the
    # gateway starts on its config file's values and says so in its log.
    (data / "routing.json").write_text('{"policy": ')
    (data / "drained.json").write_text("not json")
    with start(tmp_path, workers, "third") as third:
        wait_routable(third.url, {"low_latency": 1, "high_throughput": 1})
        assert routing(third.url)["policy"] == "adaptive", "unreadable overrides are ignored"
        assert worker_entry(third.url, workers.ht.url)["drained"] is False
        problems = [str(r.get("msg")) for r in log_records(third.log()) if r.get("level") in ("WARNING", "ERROR")]
        for name in ("routing.json", "drained.json"):
            assert any(name in msg for msg in problems), f"the unreadable {name} is logged as a problem: {problems}"
        # The next change replaces the unreadable file.
        assert httpx.patch(f"{third.url}/admin/routing", headers=ADMIN, json=PATCH, timeout=10).status_code == 200
        assert json.loads((data / "routing.json").read_text())["overrides"]["policy"] == "least_loaded"
        assert httpx.delete(f"{third.url}/v1/audio/voices/{voice}", timeout=30).status_code == 200


def test_an_upload_while_a_worker_is_down_reaches_it_after_a_gateway_crash(tmp_path: Path) -> None:
    with (
        running_emulator(tmp_path, HT_PROFILE, TIME_SCALE, name="own-ht") as ht,
        running_emulator(tmp_path, LL_PROFILE, TIME_SCALE, name="own-ll") as ll,
    ):
        own = Workers(ll, ht)
        port = int(ll.url.rsplit(":", 1)[1])
        with start(tmp_path, own, "first") as first:
            wait_routable(first.url, {"low_latency": 1, "high_throughput": 1})
            ll.popen.kill()
            ll.popen.wait(10)
            wait_until(lambda: not worker_entry(first.url, ll.url)["routable"], 30, "the dead worker is out")
            result = upload_voice(first.url, "while-down")
            assert result["workers"] == {"failed": 1, "uploaded": 1}, result  # counts: worker ids are the admin's
            assert "while-down" in worker_voices(ht.url)
            first.popen.kill()  # the gateway dies before the worker is back
            first.popen.wait(10)

        with start(tmp_path, own, "second") as second:
            wait_routable(second.url, {"high_throughput": 1})
            with emulator_on_port(tmp_path, port, LL_PROFILE, TIME_SCALE, "reborn-ll") as reborn:
                seen: set[str] | None = None
                deadline = time.monotonic() + 30
                while seen is None and time.monotonic() < deadline:
                    if worker_entry(second.url, reborn.url)["routable"]:
                        seen = worker_voices(reborn.url)
                    time.sleep(0.02)
                assert seen is not None, "the returning worker never became routable"
                assert "while-down" in seen, f"routable with {seen}: the voice uploaded while it was down is lost"
                response = httpx.post(
                    f"{second.url}/v1/audio/speech",
                    json=speech_body(voice="while-down", response_format="pcm"),
                    headers={"x-sla-class": "latency"},
                    timeout=60,
                )
                assert response.status_code == 200 and response.headers["x-gateway-pool"] == "low_latency", response.text
