from __future__ import annotations

import base64
import json

import pytest

from gateway.audio import AudioFormat, open_encoder, sse_delta, sse_done, sse_error

from .signals import chirp_pcm, irregular_chunks


def _event(frame: bytes) -> dict[str, object]:
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    assert frame.count(b"\n\n") == 1
    return json.loads(frame[len(b"data: ") : -2])


@pytest.mark.parametrize("fmt", [AudioFormat.MP3, AudioFormat.OPUS, AudioFormat.PCM])
def test_decoded_deltas_concatenate_to_the_plain_stream(fmt: AudioFormat) -> None:
    # One encoder: two Ogg streams differ anyway (each gets a random serial number).
    encoder = open_encoder(fmt)
    outputs = [encoder.encode(chunk) for chunk in irregular_chunks(chirp_pcm(1.0))]
    outputs.append(encoder.finish())
    plain = b"".join(outputs)
    frames = [sse_delta(out) for out in outputs if out]  # the relay skips empty chunks

    events = [_event(frame) for frame in frames]
    assert all(event["type"] == "speech.audio.delta" for event in events)
    assert b"".join(base64.b64decode(str(event["audio"])) for event in events) == plain


def test_delta_frame_shape() -> None:
    assert sse_delta(b"\x00\x01") == b'data: {"type":"speech.audio.delta","audio":"AAE="}\n\n'


def test_done_event_carries_usage() -> None:
    event = _event(sse_done({"input_tokens": 12, "output_tokens": 340, "total_tokens": 352}))
    assert event == {
        "type": "speech.audio.done",
        "usage": {"input_tokens": 12, "output_tokens": 340, "total_tokens": 352},
    }
    assert _event(sse_done({"input_tokens": 2, "output_tokens": 3}))["usage"] == {
        "input_tokens": 2,
        "output_tokens": 3,
        "total_tokens": 5,
    }


def test_error_event_matches_the_openai_error_envelope() -> None:
    event = _event(sse_error('worker "w1" crashed\nmid-stream', code="upstream_failed"))
    assert event == {
        "type": "error",
        "error": {
            "message": 'worker "w1" crashed\nmid-stream',
            "type": "server_error",
            "param": None,
            "code": "upstream_failed",
        },
    }
    assert _event(sse_error("boom"))["error"]["code"] is None  # type: ignore[index]


def test_error_after_audio_tells_the_client_to_discard_it() -> None:
    # As vllm-omni's speech.audio.error does once audio was sent.
    error = _event(sse_error("cut", code="upstream_error", partial_audio=True))["error"]
    assert error["partial_audio"] is True and error["action"] == "discard"  # type: ignore[index]
    assert "partial_audio" not in _event(sse_error("cut"))["error"]  # type: ignore[operator]
