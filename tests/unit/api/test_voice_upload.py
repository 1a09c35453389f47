"""The voice upload reader counts the body as it arrives: a chunked upload (no
Content-Length) is refused once it passes the limit, and nothing after is read. A body that
stops arriving is 408 at the body-read deadline; a client that hangs up is gone, not a 400."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import ClientDisconnect, Request

from gateway.api.voice_upload import FORM_OVERHEAD_BYTES, read_voice_upload, upload_body_limit
from gateway.errors import GatewayError

BOUNDARY = "b0undary"
AUDIO_LIMIT = 100_000


def request(chunks: list[bytes], headers: dict[str, str] | None = None) -> tuple[Request, list[int]]:
    pulled: list[int] = []

    async def receive() -> dict[str, Any]:
        index = len(pulled)
        pulled.append(index)
        if index >= len(chunks):
            raise AssertionError("read past the end of the body")
        return {"type": "http.request", "body": chunks[index], "more_body": index < len(chunks) - 1}

    raw = {"content-type": f"multipart/form-data; boundary={BOUNDARY}", **(headers or {})}
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [(k.encode(), v.encode()) for k, v in raw.items()]}
    return Request(scope, receive), pulled


def form(audio: bytes, **fields: str) -> bytes:
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()]
    parts.append(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="audio_sample"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n".encode() + audio + b"\r\n"
    )
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


async def test_a_small_upload_is_read_whole() -> None:
    body = form(b"RIFF" + b"\0" * 1000, name="narrator", consent="true")
    req, _ = request([body[:500], body[500:]])
    upload = await read_voice_upload(req, AUDIO_LIMIT, upload_body_limit(AUDIO_LIMIT, 10**9))
    assert upload.name == "narrator" and upload.consent == "true" and len(upload.audio) == 1004


async def test_a_chunked_upload_is_refused_at_the_limit_and_read_no_further() -> None:
    limit = upload_body_limit(AUDIO_LIMIT, 10**9)
    assert limit == AUDIO_LIMIT + FORM_OVERHEAD_BYTES
    chunk = b"\0" * 10_000
    opening = form(b"", name="x", consent="true").rsplit(b"\r\n--", 1)[0]  # up to the audio's bytes
    chunks = [opening] + [chunk] * 1000  # 10 MB of audio
    req, pulled = request(chunks)
    with pytest.raises(GatewayError) as refused:
        await read_voice_upload(req, AUDIO_LIMIT, limit)
    assert refused.value.status == 413 and refused.value.code == "payload_too_large"
    assert len(pulled) * len(chunk) <= limit + 2 * len(chunk)


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    req, pulled = request([b""], {"content-length": str(10**8)})
    with pytest.raises(GatewayError) as refused:
        await read_voice_upload(req, AUDIO_LIMIT, upload_body_limit(AUDIO_LIMIT, 10**9))
    assert refused.value.status == 413 and pulled == []


def stalling(chunks: list[bytes], then: dict[str, Any] | None = None) -> Request:
    """A request whose body is ``chunks`` and then either ``then`` or nothing, ever."""
    messages = [{"type": "http.request", "body": chunk, "more_body": True} for chunk in chunks]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        if then is not None:
            return then
        await asyncio.Event().wait()  # the client sends no more and stays connected
        raise AssertionError("unreachable")

    headers = [(b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode())]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive)


async def test_an_upload_that_stops_arriving_is_408_at_the_deadline() -> None:
    opening = form(b"RIFF" + b"\0" * 1000, name="x", consent="true").rsplit(b"\r\n--", 1)[0]
    with pytest.raises(GatewayError) as refused:
        await asyncio.wait_for(read_voice_upload(stalling([opening]), AUDIO_LIMIT, upload_body_limit(AUDIO_LIMIT, 10**9), 0.05), 5)
    assert refused.value.status == 408 and refused.value.code == "request_timeout"


async def test_a_client_hanging_up_mid_upload_is_gone_not_a_malformed_form() -> None:
    opening = form(b"RIFF", name="x", consent="true").rsplit(b"\r\n--", 1)[0]
    with pytest.raises(ClientDisconnect):
        await read_voice_upload(stalling([opening], {"type": "http.disconnect"}), AUDIO_LIMIT, upload_body_limit(AUDIO_LIMIT, 10**9), 5)
