"""Voice uploads through a real gateway: to a worker with a stream in flight they arrive one
at a time, at least ``voices.upload_spacing_ms`` apart (a lower bound: a slow machine only
spreads them more). That an idle worker gets them at once is tested with a fake clock
(tests/unit/voices/test_pacing.py): here its arrival times depend on the machine."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import SHORT_TEXT, speech_body, wait_until, worker_entry
from tests.integration.reliability_support import StubBehaviour, stub_worker
from tests.support.audio import reference_wav
from tests.support.procs import free_port
from tests.support.stack import gateway_config, running_gateway

pytestmark = pytest.mark.timeout(120)

SPACING_S = 0.3
VOICES = 3


def test_uploads_to_a_streaming_worker_are_paced(tmp_path: Path) -> None:
    busy_behaviour = StubBehaviour(speech_status=200, speech_body="empty", hang_s=4.0)  # a stream in flight
    with stub_worker(busy_behaviour) as busy, stub_worker() as idle:
        extra = {"voices": {"upload_spacing_ms": SPACING_S * 1000}, "upstream": {"first_byte_timeout_s": 30}}
        config = gateway_config(tmp_path, [busy.url], [idle.url], free_port(), extra)
        with running_gateway(tmp_path, config) as gateway:
            stream = threading.Thread(
                target=lambda: httpx.post(
                    f"{gateway.url}/v1/audio/speech", json=speech_body(SHORT_TEXT, response_format="pcm"),
                    headers={"x-sla-class": "latency"}, timeout=60,
                ),
                daemon=True,
            )  # fmt: skip
            stream.start()
            wait_until(lambda: worker_entry(gateway.url, busy.url)["inflight"] == 1, 10, "a stream on the busy worker")

            def upload(name: str) -> None:
                response = httpx.post(
                    f"{gateway.url}/v1/audio/voices", data={"name": name, "consent": "true"},
                    files={"audio_sample": (f"{name}.wav", reference_wav(), "audio/wav")}, timeout=60,
                )  # fmt: skip
                assert response.status_code == 200, response.text

            started = time.monotonic()
            uploads = [threading.Thread(target=upload, args=(f"voice{i}",)) for i in range(VOICES)]
            for thread in uploads:
                thread.start()
            for thread in uploads:
                thread.join(30)
            stream.join(30)

    def arrivals(stub: object) -> list[float]:
        return sorted(s.at - started for s in stub.requests("/v1/audio/voices", "POST"))  # type: ignore[attr-defined]

    # The first VOICES posts are the fan-out. (A stub lists no voices, so the gateway then
    # takes each for restarted and replays them: more posts follow, paced the same way.)
    paced, idle_got = arrivals(busy)[:VOICES], arrivals(idle)[:VOICES]
    assert len(paced) == len(idle_got) == VOICES
    gaps = [b - a for a, b in zip(paced, paced[1:])]
    assert all(gap >= SPACING_S * 0.9 for gap in gaps), gaps
