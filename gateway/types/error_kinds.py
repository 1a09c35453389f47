"""How a call to a worker failed, and why a request was retried: enums used as metric labels.

``UpstreamErrorKind`` values are the ``kind`` label of ``higgs_gateway_upstream_errors_total``
and ``RetryReason`` values the ``reason`` label of ``higgs_gateway_retries_total``; the
mapping between them is explicit (``RETRY_REASON``), so a cut or empty stream is never
counted as a 5xx.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class UpstreamErrorKind(StrEnum):
    """``higgs_gateway_upstream_errors_total{kind}``: how a worker call failed."""

    CONNECT = "connect"  # refused / reset / timed out before the request was sent
    FIRST_BYTE_TIMEOUT = "first_byte_timeout"  # no audio within upstream.first_byte_timeout_s
    READ_TIMEOUT = "read_timeout"  # silence between chunks once audio flowed
    STATUS_5XX = "status_5xx"
    STATUS_4XX = "status_4xx"  # the worker refused a request the gateway let through
    STREAM_ERROR = "stream_error"  # the stream broke (reset, truncation) or ended without audio
    VOICE_MISSING = "voice_missing"  # 400: the worker lost a registered voice (restarted unseen)
    # The worker failed on what the request brought (a ref_audio URL it could not fetch, or
    # the same failure on a second worker): the client's 4xx, never the worker's fault.
    REQUEST_FAULT = "request_fault"


class RetryReason(StrEnum):
    """``higgs_gateway_retries_total{reason}``: why a request went to another worker."""

    CONNECT = "connect"
    FIRST_BYTE_TIMEOUT = "first_byte_timeout"
    STATUS_5XX = "status_5xx"
    STREAM_ERROR = "stream_error"  # cut, or ended without audio, before the first byte
    VOICE_MISSING = "voice_missing"  # the worker lost a registered voice; replayed meanwhile


# Failures before the first byte that another worker may hide; the rest are final.
RETRY_REASON: Final[dict[UpstreamErrorKind, RetryReason]] = {
    UpstreamErrorKind.CONNECT: RetryReason.CONNECT,
    UpstreamErrorKind.FIRST_BYTE_TIMEOUT: RetryReason.FIRST_BYTE_TIMEOUT,
    UpstreamErrorKind.STATUS_5XX: RetryReason.STATUS_5XX,
    UpstreamErrorKind.STREAM_ERROR: RetryReason.STREAM_ERROR,
    UpstreamErrorKind.VOICE_MISSING: RetryReason.VOICE_MISSING,
}
