"""Open a worker's PCM stream, retrying on another worker until the first byte arrives.

Before the first byte nothing has reached the client, so a refused connection, a 5xx,
a hang or an empty answer can still be hidden by trying another worker (once, by
default). After it, the bytes already sent cannot be taken back: the caller ends the
stream instead (see ``gateway.api.speech_stream``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.api.errors import ApiError
from gateway.config import UpstreamConfig
from gateway.pools.fleet import VOICE_MISSING, Fleet
from gateway.pools.lease import Lease
from gateway.routing.model import Decision
from gateway.upstream.transport import UpstreamError, UpstreamResponse, UpstreamTransport
from gateway.upstream.worker_errors import translate_worker_error, worker_error_message, worker_lost_a_voice

SPEECH_PATH = "/v1/audio/speech"


class RelayObserver(Protocol):
    def upstream_error(self, pool: str, kind: str) -> None: ...

    def retried(self, reason: str) -> None: ...


# Another worker to try, excluding those already tried; None when there is none free.
RetryPicker = Callable[[set[str]], tuple[Decision, Lease] | None]


@dataclass
class OpenStream:
    """A worker stream whose first non-empty chunk has arrived."""

    lease: Lease
    decision: Decision
    response: UpstreamResponse
    first_chunk: bytes
    rest: AsyncIterator[bytes]
    attempts: int

    async def close(self) -> None:
        await self.response.close()


@dataclass
class _Failure:
    kind: str  # an UpstreamErrorKind value
    detail: str
    ejecting: bool  # counts toward the worker's ejection
    retryable: bool
    status: int = 0
    client_error: ApiError | None = None  # a 4xx the client must see as it is


class Relay:
    def __init__(
        self, transport: UpstreamTransport, fleet: Fleet, config: UpstreamConfig, observer: RelayObserver
    ) -> None:
        self._transport = transport
        self._fleet = fleet
        self._config = config
        self._observer = observer

    async def open(
        self, lease: Lease, decision: Decision, payload: dict[str, Any], pick_retry: RetryPicker
    ) -> OpenStream:
        """Returns with the lease held and the first chunk read, or raises ``ApiError``
        with the lease released. Cancellation (client gone) also releases it."""
        tried: set[str] = set()
        attempts = 0
        while True:
            attempts += 1
            worker = lease.worker
            tried.add(worker.worker_id)
            failure: _Failure | None = None
            try:
                opened = await self._attempt(lease, decision, payload, attempts)
            except _AttemptFailed as exc:
                failure = exc.failure
            except BaseException:
                lease.release()  # cancelled (client left) or a bug: never leak the slot
                raise
            if failure is None:
                self._fleet.request_succeeded(worker)
                return opened
            lease.release()
            self._fleet.request_failed(worker, failure.kind, failure.detail, failure.ejecting)
            self._observer.upstream_error(worker.pool.value, failure.kind)
            if failure.retryable and attempts <= self._config.retries:
                retry = pick_retry(tried)
                if retry is not None:
                    self._observer.retried(_retry_reason(failure.kind))
                    decision, lease = retry
                    continue
            raise _exhausted(failure, worker.worker_id)

    async def _attempt(self, lease: Lease, decision: Decision, payload: dict[str, Any], attempts: int) -> OpenStream:
        worker = lease.worker
        response: UpstreamResponse | None = None
        try:
            async with asyncio.timeout(self._config.first_byte_timeout_s):
                response = await self._transport.post_stream(worker.url + SPEECH_PATH, payload)
                if response.status != 200:
                    body = await response.read()
                    raise _AttemptFailed(_status_failure(response.status, body, worker.worker_id))
                rest = response.chunks().__aiter__()
                first = b""
                while not first:
                    first = await anext(rest)
            return OpenStream(lease, decision, response, first, rest, attempts)
        except _AttemptFailed:
            await _close_quietly(response)
            raise
        except TimeoutError as exc:
            await _close_quietly(response)
            raise _AttemptFailed(_Failure("first_byte_timeout", "no audio before the first-byte timeout", True, True)) from exc
        except StopAsyncIteration as exc:
            await _close_quietly(response)
            raise _AttemptFailed(_Failure("stream_error", "worker ended the stream without audio", True, True)) from exc
        except UpstreamError as exc:
            await _close_quietly(response)
            kind = {"connect": "connect", "read_timeout": "first_byte_timeout"}.get(exc.kind, "stream_error")
            raise _AttemptFailed(_Failure(kind, exc.detail, True, True)) from exc
        except BaseException:
            await _close_quietly(response)
            raise


class _AttemptFailed(Exception):
    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


def _status_failure(status: int, body: bytes, worker_id: str) -> _Failure:
    if status >= 500:
        message, _ = worker_error_message(body)
        # 503 says "not now" (starting, overloaded), not "broken": retry, never eject.
        return _Failure("status_5xx", f"{status}: {message}", status != 503, True, status)
    client_error = translate_worker_error(status, body, worker_id)
    if status == 400 and worker_lost_a_voice(client_error.message):
        # The gateway only sends voices it registered: this worker lost them (restarted
        # unseen). Not the client's fault: another worker may serve it while this one is
        # replayed (the fleet sees the kind and takes it out until then).
        return _Failure(VOICE_MISSING, f"{status}: {client_error.message}", False, True, status, client_error)
    return _Failure("status_4xx", f"{status}", False, False, status, client_error)


def _retry_reason(kind: str) -> str:
    return {"connect": "connect", "first_byte_timeout": "first_byte_timeout", VOICE_MISSING: VOICE_MISSING}.get(
        kind, "status_5xx"
    )


def _exhausted(failure: _Failure, worker_id: str) -> ApiError:
    if failure.client_error is not None:
        return failure.client_error
    if failure.kind == "first_byte_timeout":
        return ApiError(504, "No worker produced audio in time.", code="upstream_timeout")
    if failure.status == 503:
        return ApiError(503, "Workers are busy or starting; retry shortly.", code="upstream_unavailable", headers={"Retry-After": "1"})
    return ApiError(502, f"Speech generation failed upstream ({failure.kind}: {failure.detail}).", code="upstream_error")


async def _close_quietly(response: UpstreamResponse | None) -> None:
    if response is None:
        return
    try:
        await response.close()
    except Exception:  # closing a broken connection may itself fail; nothing to do
        pass
