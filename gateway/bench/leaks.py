"""Whether a client-facing error body gives away what stays inside the gateway.

A client's error says what the client needs and nothing more: never a worker's id, a
worker's address, or what a worker answered (the operator finds those in the gateway's
log under the request id). The soak and the fuzz tests run every error body they get
through ``LeakCheck.find``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

# Words only a worker's own error bodies use (vllm-omni 0.30.0 and vLLM: its error types,
# its generation failure, the media fetch errors), never the gateway's.
WORKER_PHRASES = (
    "Speech generation failed",
    "BadRequestError",
    "InternalServerError",
    "NotFoundError",
    "UnprocessableEntityError",
    "Failed to fetch media",
    "Cannot connect to host",
    "Maximum file size exceeded",
)


@dataclass(frozen=True)
class LeakCheck:
    worker_ids: tuple[str, ...] = ()
    worker_urls: tuple[str, ...] = ()
    upstream_messages: tuple[str, ...] = ()  # what the workers were seen answering, when known

    @classmethod
    def of(cls, worker_ids: Iterable[str], worker_urls: Iterable[str], upstream_messages: Iterable[str] = ()) -> LeakCheck:
        return cls(tuple(worker_ids), tuple(worker_urls), tuple(upstream_messages))

    def find(self, body: bytes | str) -> str | None:
        """What leaked into ``body``, or None."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        for worker_id in self.worker_ids:
            if worker_id and worker_id in text:
                return f"worker id {worker_id!r}"
        for url in self.worker_urls:
            netloc = urlsplit(url).netloc
            if netloc and netloc in text:
                return f"worker address {netloc!r}"
        for phrase in (*WORKER_PHRASES, *self.upstream_messages):
            if phrase and phrase in text:
                return f"upstream text {phrase[:80]!r}"
        return None
