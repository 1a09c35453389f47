"""One streamed speech request, timed the way vllm-omni's benchmark times it.

Two interchangeable HTTP clients: aiohttp (the default: the cheapest per streamed request
on a small machine, so the load generator never becomes the bottleneck) and httpx (kept
so the choice can be re-measured, ``--client httpx``). Both record the same thing: when
the request was sent, when each non-empty body chunk arrived and how big it was.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

import aiohttp
import httpx

from gateway.bench.stats import audio_seconds, rtf, worst_underrun
from gateway.types import POOL_HEADER, ROUTE_REASON_HEADER, SLA_CLASS_HEADER, SlaClass

ClientKind = Literal["aiohttp", "httpx"]
SPEECH_PATH = "/v1/audio/speech"


def speech_url(url: str) -> str:
    """Accept a base URL (``http://host:port``) or the full speech endpoint."""
    stripped = url.rstrip("/")
    return stripped if stripped.endswith(SPEECH_PATH) else stripped + SPEECH_PATH


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What to send: the text and the SLA class header (None = no header)."""

    text: str
    sla_class: SlaClass | None = None
    voice: str | None = None  # None: the client options' voice


@dataclass(slots=True)
class RequestResult:
    """What one request did, in seconds relative to the phase start."""

    sla_class: str | None
    input_chars: int
    sent_s: float
    status: int | None = None  # HTTP status; None when no response arrived
    error: str | None = None  # None = ok; else "http_503", "transport:ClientOSError", ...
    pool: str | None = None  # the x-gateway-pool response header
    ttfp_s: float | None = None
    e2e_s: float | None = None
    pcm_bytes: int = 0
    underrun_s: float | None = None
    # Arrival offset from sending (s) and size of every non-empty chunk; dropped after
    # the underrun is computed unless the caller keeps raw data.
    chunks: list[tuple[float, int]] = field(default_factory=list, repr=False)
    voice: str | None = None  # the spec's own voice, when it named one
    route_reason: str | None = None  # the x-gateway-route-reason response header

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def audio_s(self) -> float:
        return audio_seconds(self.pcm_bytes)

    @property
    def rtf(self) -> float | None:
        return rtf(self.e2e_s, self.pcm_bytes) if self.e2e_s is not None else None


@dataclass(frozen=True, slots=True)
class ClientOptions:
    url: str
    model: str | None = "bosonai/higgs-audio-v3-tts-4b"
    voice: str = "default"
    api_key: str | None = None
    timeout_s: float = 600.0
    max_connections: int = 1024
    extra_headers: tuple[tuple[str, str], ...] = ()


class SpeechClient(Protocol):
    async def speak(self, spec: RequestSpec, phase_start: float) -> RequestResult: ...

    async def close(self) -> None: ...


def _body(options: ClientOptions, text: str, voice: str | None = None) -> bytes:
    payload: dict[str, object] = {
        "input": text,
        "voice": voice or options.voice,
        "response_format": "pcm",
        "stream_format": "audio",
    }
    if options.model:
        payload["model"] = options.model
    return json.dumps(payload).encode()


def _headers(options: ClientOptions, spec: RequestSpec) -> dict[str, str]:
    headers = {"content-type": "application/json", **dict(options.extra_headers)}
    if options.api_key:
        headers["authorization"] = f"Bearer {options.api_key}"
    if spec.sla_class is not None:
        headers[SLA_CLASS_HEADER] = spec.sla_class.value
    return headers


def _received(result: RequestResult, sent: float, data: bytes) -> None:
    """One body chunk as it arrived: its time since sending (the first one is the TTFP)."""
    now = time.perf_counter()
    if result.ttfp_s is None:
        result.ttfp_s = now - sent
    result.chunks.append((now - sent, len(data)))
    result.pcm_bytes += len(data)


def _finish(result: RequestResult, sent: float, done: float) -> RequestResult:
    result.e2e_s = done - sent
    if result.error is None and result.pcm_bytes == 0:
        result.error = "empty_stream"
    result.underrun_s = worst_underrun(result.chunks) if result.chunks else None
    return result


# Below uvicorn's 5 s keep-alive: a client that reuses a connection the server is closing
# for idleness gets "server disconnected" (or a reset) before its request is read. That
# race is the client's to avoid (browsers and proxies keep their idle timeout below the
# server's); aiohttp's default is 15 s.
KEEPALIVE_S = 2.0


class AiohttpClient:
    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._url = speech_url(options.url)
        connector = aiohttp.TCPConnector(limit=options.max_connections, force_close=False, keepalive_timeout=KEEPALIVE_S)
        timeout = aiohttp.ClientTimeout(total=options.timeout_s)
        # auto_decompress off: PCM is never compressed, and skipping the check is cheaper.
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)

    async def speak(self, spec: RequestSpec, phase_start: float) -> RequestResult:
        body, headers = _body(self._options, spec.text, spec.voice), _headers(self._options, spec)
        result = RequestResult(spec.sla_class.value if spec.sla_class else None, len(spec.text), 0.0, voice=spec.voice)
        sent = time.perf_counter()
        result.sent_s = sent - phase_start
        try:
            async with self._session.post(self._url, data=body, headers=headers) as response:
                result.status = response.status
                result.pool, result.route_reason = response.headers.get(POOL_HEADER), response.headers.get(ROUTE_REASON_HEADER)
                if response.status != 200:
                    await response.read()
                    result.error = f"http_{response.status}"
                else:
                    async for data in response.content.iter_any():
                        if data:
                            _received(result, sent, data)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            result.error = f"transport:{type(exc).__name__}"
        return _finish(result, sent, time.perf_counter())

    async def close(self) -> None:
        await self._session.close()


class HttpxClient:
    def __init__(self, options: ClientOptions) -> None:
        self._options = options
        self._url = speech_url(options.url)
        limits = httpx.Limits(max_connections=options.max_connections, max_keepalive_connections=options.max_connections)
        self._client = httpx.AsyncClient(timeout=options.timeout_s, limits=limits)

    async def speak(self, spec: RequestSpec, phase_start: float) -> RequestResult:
        body, headers = _body(self._options, spec.text, spec.voice), _headers(self._options, spec)
        result = RequestResult(spec.sla_class.value if spec.sla_class else None, len(spec.text), 0.0, voice=spec.voice)
        sent = time.perf_counter()
        result.sent_s = sent - phase_start
        try:
            async with self._client.stream("POST", self._url, content=body, headers=headers) as response:
                result.status = response.status_code
                result.pool, result.route_reason = response.headers.get(POOL_HEADER), response.headers.get(ROUTE_REASON_HEADER)
                if response.status_code != 200:
                    await response.aread()
                    result.error = f"http_{response.status_code}"
                else:
                    async for data in response.aiter_raw():
                        if data:
                            _received(result, sent, data)
        except (httpx.HTTPError, OSError) as exc:
            result.error = f"transport:{type(exc).__name__}"
        return _finish(result, sent, time.perf_counter())

    async def close(self) -> None:
        await self._client.aclose()


def make_client(kind: ClientKind, options: ClientOptions) -> SpeechClient:
    return AiohttpClient(options) if kind == "aiohttp" else HttpxClient(options)
