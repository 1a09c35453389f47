"""The first audio of every format and speed leaves with the worker's first chunk, and the
predicted TTFP header says when: a gateway in front of an emulated worker at real time."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.conftest import speech_body
from tests.support.stack import Stack, running_stack

FORMATS = ("pcm", "wav", "opus", "flac", "mp3", "aac")
SPEEDS = (1.0, 0.8, 1.5)
RUNS = 3
# The done criterion is 10% (measured precisely by `bench first-audio`); a shared test
# machine gets a wider margin.
PREDICTION_MARGIN = 0.2


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Time scale 1: the worker's real chunk schedule (40 ms first chunk, then a ~250 ms hole).
    with running_stack(tmp_path_factory.mktemp("first-audio"), ll_workers=1, ht_workers=0, time_scale=1.0) as running:
        yield running


def first_audio(client: httpx.Client, url: str, fmt: str, speed: float, **fields: object) -> tuple[float, float]:
    """(seconds to the first audio byte, the predicted TTFP header in seconds); the rest is not read."""
    body = speech_body(response_format=fmt, speed=speed, **fields)
    started = time.perf_counter()
    with client.stream("POST", f"{url}/v1/audio/speech", json=body, headers={"x-sla-class": "latency"}) as response:
        assert response.status_code == 200
        predicted_s = float(response.headers["x-gateway-predicted-ttfp-ms"]) / 1000
        for chunk in response.iter_raw():
            if len(chunk) > (44 if fmt == "wav" else 0):  # a wav header alone is not audio
                return time.perf_counter() - started, predicted_s
    raise AssertionError("no audio")


def test_every_format_and_speed_starts_at_the_first_chunk_as_predicted(stack: Stack) -> None:
    with httpx.Client(timeout=30) as client:
        first_audio(client, stack.url, "mp3", 1.5)  # warm: connections, codec tables
        measured: dict[tuple[str, float], tuple[float, float]] = {}
        for fmt in FORMATS:
            for speed in SPEEDS:
                runs = [first_audio(client, stack.url, fmt, speed) for _ in range(RUNS)]
                measured[fmt, speed] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
    pcm_s = measured["pcm", 1.0][0]
    for (fmt, speed), (ttfp_s, predicted_s) in measured.items():
        # No format or speed waits for the worker's second chunk (~250 ms after the first).
        assert ttfp_s - pcm_s < 0.1, f"{fmt} x{speed}: {ttfp_s * 1000:.0f} ms vs pcm {pcm_s * 1000:.0f} ms"
        assert predicted_s == pytest.approx(ttfp_s, rel=PREDICTION_MARGIN), f"{fmt} x{speed}"


def test_streams_at_another_sample_rate_leave_the_format_prediction_alone(stack: Stack) -> None:
    # mp3 at 16 kHz starts with the worker's second chunk (~250 ms later): learned on its own,
    # it must not teach the gateway that every mp3 request waits as long.
    with httpx.Client(timeout=30) as client:
        for _ in range(8):
            first_audio(client, stack.url, "mp3", 1.0, sample_rate=16_000)
        runs = [first_audio(client, stack.url, "mp3", 1.0) for _ in range(RUNS)]
    ttfp_s, predicted_s = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    assert predicted_s == pytest.approx(ttfp_s, rel=PREDICTION_MARGIN)
