"""Reference audio for voice cloning, resolved the way the released worker does it.

vllm-omni 0.30.0 hands ``ref_audio`` to vLLM's ``MediaConnector`` while it builds the
prompt (``serving_speech.py`` ``_resolve_ref_audio_array``; vllm 0.30.0
``multimodal/media/connector.py`` ``load_from_url_async``):

* ``data:`` base64 is decoded; a URI without a comma is a ``ValueError`` (400), one
  that is not base64 a ``NotImplementedError`` (500).
* ``http(s)`` is fetched (``connections.py`` ``async_get_bytes``, aiohttp): up to
  ``VLLM_MEDIA_FETCH_MAX_RETRIES`` (3) tries for timeouts, connection errors and a
  remote's 5xx, the ``VLLM_AUDIO_FETCH_TIMEOUT`` (10 s) timeout growing x4 per
  try with 1 s then 4 s between tries. A remote 4xx becomes "Failed to fetch media from
  URL: HTTP 404 error (...)", more than ``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB`` (25) MB
  "Maximum file size exceeded: ...". None of these is a ``ValueError``: the request
  ends with 500 "Speech generation failed: <the error>".
* ``file:`` is refused without ``--allowed-local-media-path`` (never set here): 500.
* any other scheme: ``ValueError`` "The URL must be either a HTTP, data or file URL." (400).

Then the clip must be 1-30 s (``_finalize_fetched_ref_audio``: a ``ValueError``, 400).
A resolved clip is cached under its ``ref_audio`` string (``gateway.emulator.ref_cache``):
a repeat is neither fetched nor decoded, so a cached URL keeps working after its host went
down; errors are never cached.
The back-off between tries is multiplied by ``--time-scale`` like every other wait the
emulator models; the fetch's own timeout is not: it bounds real network time, which a faster
emulated GPU does not shorten (scaled, a local fetch on a busy machine timed out at 10 ms).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import av

from gateway.emulator.errors import WorkerError, bad_request, generation_failed
from gateway.emulator.ref_cache import LruBytesCache, ReferenceCaches, ResolvedClip, artifact_key, resolve_cache_key

T = TypeVar("T")

MIN_SECONDS = 1.0  # serving_speech.py _REF_AUDIO_MIN_DURATION
MAX_SECONDS = 30.0  # _REF_AUDIO_MAX_DURATION
MIB = 1024 * 1024
READ_CHUNK = 64 * 1024  # connections.py _RESPONSE_READ_CHUNK_SIZE
BACKOFF_FACTOR = 4  # connections.py _RETRY_BACKOFF_FACTOR


@dataclass(frozen=True)
class FetchSettings:
    """vLLM's media fetch settings, from the same environment variables (vllm/envs.py)."""

    timeout_s: float = 10.0  # VLLM_AUDIO_FETCH_TIMEOUT
    max_retries: int = 3  # VLLM_MEDIA_FETCH_MAX_RETRIES
    max_clip_bytes: int = 25 * MIB  # VLLM_MAX_AUDIO_CLIP_FILESIZE_MB
    max_download_bytes: int | None = 256 * MIB  # VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB (<= 0: none)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> FetchSettings:
        download_mb = int(env.get("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", "256"))
        return cls(
            timeout_s=float(int(env.get("VLLM_AUDIO_FETCH_TIMEOUT", "10"))),
            max_retries=int(env.get("VLLM_MEDIA_FETCH_MAX_RETRIES", "3")),
            max_clip_bytes=int(env.get("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "25")) * MIB,
            max_download_bytes=download_mb * MIB if download_mb > 0 else None,
        )


class _SizeExceeded(Exception):
    """connections.py HTTPResponseSizeExceededError / MediaDownloadSizeExceededError."""

    def __init__(self, max_bytes: int, received: int, download_limit: bool) -> None:
        if download_limit:
            text = f"Remote media download exceeds VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB={max_bytes / MIB:g} (received at least {received} bytes)"
        else:
            text = (
                "Maximum file size exceeded: HTTP response exceeded maximum size "
                f"of {max_bytes} bytes (received at least {received} bytes) "
                f"(parameter=audio_filesize_mb, value={received / MIB})"
            )
        super().__init__(text)


class _RemoteRefused(Exception):
    """connector.py _wrap_media_fetch_error: a remote 4xx (other than 408/429)."""

    def __init__(self, status: int, url: str) -> None:
        super().__init__(f"Failed to fetch media from URL: HTTP {status} error (parameter=image_url, value={url})")


class RefAudioResolver:
    """Turns a request's ``ref_audio`` into the clip's length in seconds, or the worker's error."""

    def __init__(
        self, time_scale: float = 1.0, settings: FetchSettings | None = None, caches: ReferenceCaches | None = None
    ) -> None:
        self._scale = time_scale
        self._settings = settings or FetchSettings.from_env()
        self._session: aiohttp.ClientSession | None = None
        self.caches = caches or ReferenceCaches()

    @property
    def resolved(self) -> LruBytesCache[str, ResolvedClip]:
        return self.caches.resolved

    async def seconds(self, ref_audio: str) -> float:
        return (await self.resolve(ref_audio)).seconds

    async def resolve(self, ref_audio: str) -> ResolvedClip:
        """serving_speech.py _resolve_ref_audio_array 1298-1378: the cache first, then fetch and decode."""
        key = resolve_cache_key(ref_audio)
        cached = self.caches.resolved.get(key)
        if cached is not None:
            return cached
        clip = await self._fetch_and_decode(ref_audio)
        self.caches.resolved.put(key, clip, clip.nbytes)
        return clip

    def remember(self, key: str, clip: ResolvedClip) -> None:
        """Cache a clip resolved some other way (an uploaded voice's stored sample)."""
        self.caches.resolved.put(key, clip, clip.nbytes)

    async def _fetch_and_decode(self, ref_audio: str) -> ResolvedClip:
        if ref_audio[:5].lower() == "data:":
            data = _data_uri_bytes(ref_audio)
        else:
            scheme = ref_audio.partition(":")[0].lower() if ":" in ref_audio else ""
            if scheme.startswith("http"):
                data = await self._fetch(ref_audio)
            elif scheme == "file":
                raise generation_failed("Cannot load local files without `--allowed-local-media-path`.")
            else:
                raise bad_request("The URL must be either a HTTP, data or file URL.")
        if len(data) > self._settings.max_clip_bytes:  # audio.py AudioMediaIO._validate_encoded_size
            raise generation_failed(
                f"Maximum file size exceeded (parameter=audio_filesize_mb, value={len(data) / MIB})"
            )
        return decoded_clip(data, await asyncio.to_thread(probe_audio, data))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # ---- http(s) ----------------------------------------------------------------------
    async def _fetch(self, url: str) -> bytes:
        try:
            return await self._with_retries(lambda timeout: self._get_bytes(url, timeout))
        except _RemoteRefused as exc:
            raise generation_failed(str(exc)) from None
        except (_SizeExceeded, aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise generation_failed(str(exc)) from None

    async def _with_retries(self, attempt: Callable[[float], Awaitable[T]]) -> T:
        """connections.py _async_retry: the timeout grows x4 per try, 1 s then 4 s apart."""
        tries = max(self._settings.max_retries, 1)
        for number in range(tries):
            try:
                return await attempt(self._settings.timeout_s * BACKOFF_FACTOR**number)
            except Exception as exc:
                if not _retryable(exc) or number + 1 >= tries:
                    raise
                await asyncio.sleep(BACKOFF_FACTOR**number * self._scale)
        raise AssertionError("unreachable")

    async def _get_bytes(self, url: str, timeout_s: float) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=True)
        headers = {"User-Agent": "vLLM/0.30.0"}
        async with self._session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if 400 <= response.status < 500 and response.status not in (408, 429):
                raise _RemoteRefused(response.status, url)
            response.raise_for_status()
            return await self._read_bounded(response)

    async def _read_bounded(self, response: aiohttp.ClientResponse) -> bytes:
        """connections.py _async_read_response_bytes: the smaller of the two limits applies."""
        clip, download = self._settings.max_clip_bytes, self._settings.max_download_bytes
        download_limit = download is not None and download <= clip
        limit = download if download_limit and download is not None else clip
        if response.content_length is not None and response.content_length > limit:
            raise _SizeExceeded(limit, response.content_length, download_limit)
        chunks: list[bytes] = []
        received = 0
        async for chunk in response.content.iter_chunked(READ_CHUNK):
            received += len(chunk)
            if received > limit:
                raise _SizeExceeded(limit, received, download_limit)
            chunks.append(chunk)
        return b"".join(chunks)


def _retryable(exc: BaseException) -> bool:
    """connections.py _is_retryable: timeouts, connection failures and a remote's 5xx."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, aiohttp.ServerTimeoutError, ConnectionError)):
        return True
    if isinstance(exc, aiohttp.ClientConnectionError):
        return True
    return isinstance(exc, aiohttp.ClientResponseError) and exc.status >= 500


def _data_uri_bytes(uri: str) -> bytes:
    """connector.py _load_data_url and AudioMediaIO.load_base64."""
    spec, comma, payload = uri[5:].partition(",")
    if not comma:
        raise bad_request(f"Invalid data URL {uri[:32]!r}: missing ',' separator.")
    _, semicolon, encoding = spec.rpartition(";")
    if not semicolon or encoding != "base64":
        raise generation_failed("Only base64 data URLs are supported for now.")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise bad_request(str(exc)) from None


def decoded_clip(data: bytes, probed: tuple[float, int] | None) -> ResolvedClip:
    seconds = _checked_duration(None if probed is None else probed[0])
    return ResolvedClip(seconds, probed[1] if probed else 24000, artifact_key(data))


def probe_audio_seconds(data: bytes) -> float | None:
    """Duration of an encoded audio file (any format PyAV reads), or None if unreadable."""
    probed = probe_audio(data)
    return None if probed is None else probed[0]


def probe_audio(data: bytes) -> tuple[float, int] | None:
    """(seconds, sample rate) of an encoded audio file, or None if unreadable."""
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                return None
            stream = container.streams.audio[0]
            samples = 0
            rate = stream.rate or stream.codec_context.sample_rate
            for frame in container.decode(stream):
                samples += frame.samples
                rate = frame.sample_rate or rate
            return (samples / rate, int(rate)) if rate else None
    except (av.error.FFmpegError, ValueError, UnicodeDecodeError):
        return None


def _checked_duration(seconds: float | None) -> float:
    """serving_speech.py _finalize_fetched_ref_audio (its ValueErrors are 400s)."""
    if seconds is None:
        raise bad_request("ref_audio could not be decoded as audio")
    if seconds < MIN_SECONDS:
        raise bad_request(
            f"Reference audio too short ({seconds:.1f}s). At least {MIN_SECONDS:.0f}s of clear speech is required."
        )
    if seconds > MAX_SECONDS:
        raise bad_request(f"Reference audio too long ({seconds:.1f}s). Maximum {MAX_SECONDS:.0f}s supported — use a shorter clip.")
    return seconds


__all__ = ["FetchSettings", "RefAudioResolver", "WorkerError", "decoded_clip", "probe_audio", "probe_audio_seconds"]
