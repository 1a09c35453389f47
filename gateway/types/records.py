"""How a request, a session's sentence and a session ended: the records the recorder and
the trace both read (one definition each, filled in by the path that serves them)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.types import SlaClass
from gateway.types.decision import Decision

DEFAULT_TIER = "default"  # the tier of a key configured without one, and of anonymous requests


@dataclass(frozen=True, slots=True)
class KeyIdentity:
    key_id: str  # safe to log: a prefix of the key's digest, or "anonymous"
    authenticated: bool
    tier: str = DEFAULT_TIER
    name: str | None = None  # the configured name of a named key
    digest: str | None = field(default=None, repr=False)  # what the limits are kept under

    @property
    def label(self) -> str:
        """The key in per-key metrics: its configured name, else its key id."""
        return self.name or self.key_id


@dataclass(slots=True)
class RequestRecord:
    """One speech request as the pipeline fills it in; recorded once, when it ends."""

    request_id: str
    sla_class: SlaClass = SlaClass.BALANCED
    started: float = field(default_factory=time.perf_counter)
    key: KeyIdentity | None = None  # the API key that sent it, when keys are configured
    pool: str | None = None  # where its audio came from; None: never reached a worker
    worker: str | None = None
    reason: str | None = None  # the routing reason
    queue_wait_s: float | None = None  # time in admission; None: never left it with an answer
    rejected: str | None = None  # admission's reason for turning it away
    ttfp_s: float | None = None  # start to the first byte sent to the client
    pcm_bytes: int = 0
    retries: int = 0
    error: str | None = None  # a short error code, never a worker's message
    disconnect_phase: str | None = None
    trace_id: str | None = None  # the trace it belongs to (recorded here, or the caller's)
    # From the request body, once parsed.
    model: str | None = None
    response_format: str | None = None
    stream_format: str | None = None
    input_text: str | None = None

    def first_byte_sent(self) -> None:
        if self.ttfp_s is None:
            self.ttfp_s = time.perf_counter() - self.started


@dataclass(frozen=True, slots=True)
class SentenceEnd:
    """How a voice session's sentence request ended, for its trace."""

    outcome: str  # completed, cancelled, failed, cut
    status: int  # what the request would have been answered over HTTP; 499: cancelled
    error: str | None
    detail: str | None
    decision: Decision | None
    retries: int
    received_bytes: int


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """How a voice session ended, for its trace."""

    status: int  # 101 once accepted; the refusal's status otherwise
    end: str  # closed, client_gone, timeout, refused, error, denied
    error: str | None = None
    utterances: int = 0
    sentences: int = 0
    model: str | None = None
    response_format: str | None = None
