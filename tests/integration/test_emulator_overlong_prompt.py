"""An over-long prompt over a real socket: a 200, then the connection drops with no byte.

What the gateway sees from a released worker (vllm input_processor.py 440-485 runs after
serving_speech.py has sent the stream's 200): a stream error before the first byte.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.procs import Proc, running_emulator

OVERLONG = "\U00020000" * 2800  # 8400 tokens at 3 a character, past max_model_len 8192


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    with running_emulator(tmp_path_factory.mktemp("overlong"), time_scale=0.02) as proc:
        yield proc


def test_a_raw_stream_is_a_200_then_a_dropped_connection_with_no_byte(emulator: Proc) -> None:
    received = bytearray()
    with httpx.Client(base_url=emulator.url, timeout=30) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            with client.stream("POST", "/v1/audio/speech", json={"input": OVERLONG, "stream_format": "audio", "response_format": "pcm"}) as response:
                assert response.status_code == 200
                for chunk in response.iter_raw():
                    received += chunk
        assert received == b""
        # The same worker serves an ordinary request right after.
        assert client.post("/v1/audio/speech", json={"input": "Fine.", "max_new_tokens": 20}).status_code == 200
        assert client.get("/load").json() == {"server_load": 0}


def test_sse_and_whole_file_answer_as_the_released_worker(emulator: Proc) -> None:
    with httpx.Client(base_url=emulator.url, timeout=30) as client:
        sse = client.post("/v1/audio/speech", json={"input": OVERLONG, "stream": True, "response_format": "pcm"})
        assert sse.status_code == 200 and sse.text.startswith("event: speech.audio.error\n")
        whole = client.post("/v1/audio/speech", json={"input": OVERLONG})
        assert whole.status_code == 500
        assert whole.json()["error"]["message"].startswith("Speech generation failed: The decoder prompt (length 8403)")
