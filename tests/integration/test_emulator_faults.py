"""Faults on demand: by flag at start-up and through POST /emulator/faults."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.support.procs import Proc, running_emulator

TEXT = "The quick brown fox jumps over the lazy dog near the quiet river bank, twice."
STREAM = {"input": TEXT, "stream_format": "audio", "response_format": "pcm"}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    # Started with one failure armed by flag, to check the flags too.
    with running_emulator(tmp_path_factory.mktemp("faults"), time_scale=0.02, extra=["--fail-next", "1"]) as proc:
        yield proc


@pytest.fixture
def client(emulator: Proc) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator.url, timeout=30) as http:
        yield http
        http.post("/emulator/faults", json={"clear": True})


def set_faults(client: httpx.Client, **faults: object) -> dict[str, object]:
    response = client.post("/emulator/faults", json=faults)
    assert response.status_code == 200, response.text
    return response.json()


def test_fail_next_from_the_command_line_then_by_endpoint(client: httpx.Client) -> None:
    # The --fail-next 1 flag: the module's first speech request fails, the next succeeds.
    first = client.post("/v1/audio/speech", json={"input": "Hi."})
    assert first.status_code == 500
    assert first.json()["error"]["code"] == 500 and first.json()["error"]["type"] == "InternalServerError"
    assert client.post("/v1/audio/speech", json={"input": "Hi."}).status_code == 200
    state = set_faults(client, fail_next=2)
    assert state["fail_next"] == 2
    assert [client.post("/v1/audio/speech", json={"input": "Hi."}).status_code for _ in range(3)] == [500, 500, 200]
    assert client.get("/emulator/faults").json()["fail_next"] == 0
    assert 'vllm_omni:requests_failed_total{model_name="bosonai/higgs-audio-v3-tts-4b",reason="stage_error"} 3.0' in client.get("/metrics").text


def test_cut_after_chunks_drops_the_connection(client: httpx.Client) -> None:
    set_faults(client, cut_after_chunks=2)
    received = bytearray()
    with pytest.raises(httpx.RemoteProtocolError):
        with client.stream("POST", "/v1/audio/speech", json=STREAM) as response:
            assert response.status_code == 200
            for chunk in response.iter_raw():
                received += chunk
    assert len(received) == 1920 + 48000  # exactly two chunks, then nothing
    # Whole-file requests are cut before any audio.
    with pytest.raises(httpx.RemoteProtocolError):
        client.post("/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"}).read()
    set_faults(client, cut_after_chunks=None)
    assert client.post("/v1/audio/speech", json={"input": "Fine again."}).status_code == 200
    text = client.get("/metrics").text
    assert 'speech_stream_aborted_total{model_name="bosonai/higgs-audio-v3-tts-4b",reason="error"}' in text


def test_error_after_chunks_sends_an_sse_error_event(client: httpx.Client) -> None:
    set_faults(client, error_after_chunks=1)
    response = client.post("/v1/audio/speech", json={**STREAM, "stream_format": "sse"})
    events = [block.split("\n") for block in response.text.strip("\n").split("\n\n")]
    assert [e[0] for e in events] == ["event: speech.audio.delta", "event: speech.audio.error"]
    error = json.loads(events[-1][1].removeprefix("data: "))
    assert error["type"] == "speech.audio.error"
    assert error["error"]["type"] == "server_error" and error["error"]["code"] == 500 and error["error"]["param"] is None
    assert client.post("/v1/audio/speech", json={"input": TEXT}).status_code == 500  # whole file: 500


def test_hang_delays_the_first_byte(client: httpx.Client) -> None:
    set_faults(client, hang_seconds=1.0)
    started = time.monotonic()
    assert client.post("/v1/audio/speech", json={"input": "Hi."}).status_code == 200
    assert time.monotonic() - started >= 1.0
    assert client.get("/load").json() == {"server_load": 0}


def test_hung_request_counts_in_load_until_cleared(emulator: Proc, client: httpx.Client) -> None:
    set_faults(client, hang_seconds=60.0)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{emulator.url}/v1/audio/speech", json={"input": "Hi."}, timeout=httpx.Timeout(30, read=0.5))
    # The abandoned request is still hanging in the worker, as on a hung real worker.
    assert client.get("/load").json()["server_load"] == 1
    set_faults(client, clear=True)  # clearing lets hung requests go on; this one's client is gone
    assert wait_for(lambda: client.get("/load").json()["server_load"] == 0)


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_unhealthy_and_clear(client: httpx.Client) -> None:
    state = set_faults(client, unhealthy=True, fail_next=5, hang_seconds=2.5)
    assert state == {
        "fail_next": 5, "cut_after_chunks": None, "error_after_chunks": None, "hang_seconds": 2.5, "unhealthy": True,
        "engine_dead": False, "leak_load": False, "noisy_from": None, "silent_from": None, "clipped_from": None,
    }  # fmt: skip
    health = client.get("/health")
    assert health.status_code == 503 and health.json() == {"status": "unhealthy"}
    assert set_faults(client, clear=True) == {
        "fail_next": 0, "cut_after_chunks": None, "error_after_chunks": None, "hang_seconds": None, "unhealthy": False,
        "engine_dead": False, "leak_load": False, "noisy_from": None, "silent_from": None, "clipped_from": None,
    }  # fmt: skip
    assert client.get("/health").status_code == 200


def test_bad_fault_bodies_are_refused(client: httpx.Client) -> None:
    for body in ({"fail_next": -1}, {"explode": True}, {"hang_seconds": "soon"}):
        response = client.post("/emulator/faults", json=body)
        assert response.status_code == 400 and response.json()["error"]["code"] == 400
