"""Reading a voice upload (multipart: name, audio_sample, consent, ...) within its size.

The body is counted as it arrives, not only by its ``Content-Length``: a chunked upload
declares none, and Starlette's parser would spool every byte of it to a temporary file
before anyone looked at the size. The parser gets the ASGI messages through a counter
that refuses (413) the first message past the limit, so at most the limit plus one
message is ever read, whatever the client sends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartParser
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

from gateway.errors import GatewayError, bad_request
from gateway.voices.registry import FanOutResult, VoiceRegistry

# The form's text fields and multipart framing on top of the audio: name (64), consent
# (256), ref_text (2000 characters, up to 4 bytes each), speaker_description (1000), boundaries.
FORM_OVERHEAD_BYTES = 64 * 1024
MAX_FORM_FIELDS = 8


@dataclass(frozen=True, slots=True)
class VoiceUpload:
    name: object
    audio: bytes
    consent: object
    ref_text: object
    speaker_description: object

    async def register(self, voices: VoiceRegistry, owner: str, owner_limit: int | None = None) -> FanOutResult:
        """Store it as ``owner``'s voice and upload it to the workers (one path for
        ``/v1/audio/voices`` and ``/admin/voices``)."""
        return await voices.add(
            self.name,  # type: ignore[arg-type]  # validated by the store
            self.audio,
            consent=self.consent,
            ref_text=self.ref_text,
            speaker_description=self.speaker_description,
            owner=owner,
            owner_limit=owner_limit,
        )


def upload_body_limit(max_upload_bytes: int, max_body_bytes: int) -> int:
    """The most bytes an upload's body may have: its audio plus the form around it."""
    return min(max_body_bytes, max_upload_bytes + FORM_OVERHEAD_BYTES)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, f"Upload exceeds {limit} bytes of audio.", param="audio_sample", code="payload_too_large")


async def _counted(receive: Receive, body_limit: int, audio_limit: int) -> AsyncGenerator[bytes, None]:
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > body_limit:
            raise _too_large(audio_limit)
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def read_voice_upload(
    request: Request, audio_limit: int, body_limit: int, timeout_s: float | None = None
) -> VoiceUpload:
    """The upload's fields; 415 for anything but multipart, 413 past ``body_limit`` bytes
    of body or ``audio_limit`` bytes of audio, 408 when the body has not all arrived within
    ``timeout_s``, 400 for a malformed form. A client that hangs up mid-body raises
    ``ClientDisconnect`` (499: nobody's error)."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise GatewayError(
            415, "Upload voices as multipart/form-data with fields name, audio_sample and consent.",
            code="unsupported_media_type",
        )  # fmt: skip
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > body_limit:
        raise _too_large(audio_limit)
    parser = MultiPartParser(
        request.headers,
        _counted(request.receive, body_limit, audio_limit),
        max_files=1,
        max_fields=MAX_FORM_FIELDS,
        max_part_size=FORM_OVERHEAD_BYTES,
    )
    try:
        async with asyncio.timeout(timeout_s):
            form = await parser.parse()
    except TimeoutError:
        # The parser closed (deleted) its spooled files on the cancellation.
        raise GatewayError(
            408, f"The upload did not arrive within {timeout_s:g} s (server.body_timeout_s).",
            code="request_timeout", headers={"Connection": "close"},  # the rest of the body is not read
        ) from None  # fmt: skip
    except (GatewayError, ClientDisconnect):
        raise  # over the limit, or nobody left to answer; the parser closed its spooled files
    except Exception as exc:  # malformed multipart, a text field over its part size, a client gone
        raise bad_request(f"Could not read the multipart form: {exc}", code="invalid_form") from exc
    try:
        return await _fields(form, audio_limit)
    finally:
        await form.close()


async def _fields(form: FormData, audio_limit: int) -> VoiceUpload:
    sample = form.get("audio_sample")
    if not isinstance(sample, UploadFile):
        raise bad_request("Missing file field 'audio_sample'.", "audio_sample", code="missing_required_parameter")
    audio = await sample.read(audio_limit + 1)
    if len(audio) > audio_limit:
        raise GatewayError(413, f"audio_sample exceeds {audio_limit} bytes.", param="audio_sample", code="payload_too_large")
    name = form.get("name")
    if not isinstance(name, str) or not name:
        raise bad_request("Missing field 'name'.", "name", code="missing_required_parameter")
    return VoiceUpload(name, audio, form.get("consent"), form.get("ref_text"), form.get("speaker_description"))
