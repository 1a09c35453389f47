"""Gateway core, voices: one upload makes a voice usable through both pools, on every
worker; a delete removes it everywhere; a worker that restarts empty gets every voice
back before the gateway routes to it again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import (
    SHORT_TEXT,
    emulator_on_port,
    speech_body,
    wait_until,
    worker_entry,
    worker_pcm,
)
from tests.support.audio import reference_wav
from tests.support.stack import LL_PROFILE, Stack, running_stack
from tests.unit.voices.samples import encoded

TIME_SCALE = 0.02


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # `throughput` never takes low-latency places here, so each class names its own pool.
    extra = {"routing": {"thresholds": {"reserve_for_latency": 16, "adaptive_latency_reserve": False}}}
    with running_stack(tmp_path_factory.mktemp("voices"), 1, 1, time_scale=TIME_SCALE, extra=extra) as running:
        yield running


def upload(stack: Stack, name: str) -> dict[str, Any]:
    response = httpx.post(
        f"{stack.url}/v1/audio/voices",
        data={"name": name, "consent": "true"},
        files={"audio_sample": (f"{name}.wav", reference_wav(), "audio/wav")},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()


def gateway_voice_ids(stack: Stack) -> set[str]:
    response = httpx.get(f"{stack.url}/v1/audio/voices", timeout=10)
    assert response.status_code == 200, response.text
    voices = response.json()["voices"]
    assert all(isinstance(v, dict) and "id" in v for v in voices), voices
    return {v["id"] for v in voices}


def worker_voice_names(worker_url: str) -> set[str]:
    response = httpx.get(f"{worker_url}/v1/audio/voices", timeout=10)
    assert response.status_code == 200, response.text
    return {v["name"] for v in response.json()["uploaded_voices"]}


def all_workers(stack: Stack) -> list[str]:
    return [proc.url for procs in stack.workers.values() for proc in procs]


def speak(stack: Stack, voice: str, sla_class: str) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/v1/audio/speech",
        json=speech_body(voice=voice, response_format="pcm"),
        headers={"x-sla-class": sla_class},
        timeout=60,
    )


def test_upload_once_use_everywhere_delete_everywhere(stack: Stack) -> None:
    name = "narrator-one"
    result = upload(stack, name)
    assert result["voice"]["id"] == name
    assert name in gateway_voice_ids(stack)
    for url in all_workers(stack):
        assert name in worker_voice_names(url), f"{name} missing on worker {url}"

    default_pcm = worker_pcm(stack.workers["low_latency"][0].url, SHORT_TEXT)
    for sla_class, pool in (("latency", "low_latency"), ("throughput", "high_throughput")):
        response = speak(stack, name, sla_class)
        assert response.status_code == 200, response.text
        assert response.headers["x-gateway-pool"] == pool
        assert response.content and response.content != default_pcm, "the uploaded voice, not the default one"
    # The voice object form names the same voice.
    as_object = httpx.post(
        f"{stack.url}/v1/audio/speech",
        json=speech_body(voice={"id": name}, response_format="pcm"),
        headers={"x-sla-class": "latency"},
        timeout=60,
    )
    assert as_object.status_code == 200 and as_object.content == speak(stack, name, "latency").content

    deleted = httpx.delete(f"{stack.url}/v1/audio/voices/{name}", timeout=30)
    assert deleted.status_code == 200, deleted.text
    assert name not in gateway_voice_ids(stack)
    for url in all_workers(stack):
        assert name not in worker_voice_names(url), f"{name} still on worker {url}"
    gone = speak(stack, name, "latency")
    assert gone.status_code == 400 and gone.json()["error"]["param"] == "voice", gone.text
    again = httpx.delete(f"{stack.url}/v1/audio/voices/{name}", timeout=30)
    assert again.status_code == 404, again.text


@pytest.mark.parametrize(("container", "filename", "mime"), [("webm", "rec.webm", "audio/webm"), ("ipod", "memo.m4a", "audio/mp4")])
def test_browser_and_phone_recordings_reach_every_worker(stack: Stack, container: str, filename: str, mime: str) -> None:
    # A vllm-omni 0.30.0 worker (and the emulator) decodes samples with soundfile, which
    # reads neither WebM nor M4A: the gateway must forward a WAV it can read.
    name = f"recorded-{container}"
    response = httpx.post(
        f"{stack.url}/v1/audio/voices",
        data={"name": name, "consent": "true"},
        files={"audio_sample": (filename, encoded(container, 3.0), mime)},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    for url in all_workers(stack):
        entries = {v["name"]: v for v in httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["uploaded_voices"]}
        assert entries[name]["mime_type"] == "audio/wav", entries
    assert speak(stack, name, "latency").status_code == 200
    assert httpx.delete(f"{stack.url}/v1/audio/voices/{name}", timeout=30).status_code == 200


def test_restarted_worker_gets_voices_back_before_it_is_routable(stack: Stack, tmp_path: Path) -> None:
    """Runs last in this module: it replaces the stack's low-latency worker."""
    before = "narrator-two"
    upload(stack, before)
    ll = stack.workers["low_latency"][0]
    port = int(ll.url.rsplit(":", 1)[1])
    assert before in worker_voice_names(ll.url)

    ll.stop()
    wait_until(
        lambda: worker_entry(stack.url, ll.url)["state"] == "ejected",
        timeout=30,
        message="the stopped low-latency worker is ejected by the health checker",
    )
    # Uploaded while the worker is down: it must get this one on its return too.
    during = "narrator-three"
    upload(stack, during)

    with emulator_on_port(tmp_path, port, LL_PROFILE, TIME_SCALE, "restarted-ll") as fresh:
        routable_at_first_sight: set[str] | None = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if worker_entry(stack.url, fresh.url)["routable"]:
                routable_at_first_sight = worker_voice_names(fresh.url)
                break
            time.sleep(0.02)
        assert routable_at_first_sight is not None, "the restarted worker never became routable again"
        assert {before, during} <= routable_at_first_sight, (
            f"worker routable with voices {routable_at_first_sight}: replay must finish before routing"
        )
        response = speak(stack, during, "latency")
        assert response.status_code == 200, response.text
        assert response.headers["x-gateway-pool"] == "low_latency"
        for name in (before, during):
            assert httpx.delete(f"{stack.url}/v1/audio/voices/{name}", timeout=30).status_code == 200
        assert not worker_voice_names(fresh.url) & {before, during}
