"""The exception a worker transport raises; its kinds are ``gateway.types.error_kinds``."""

from __future__ import annotations

from gateway.types.error_kinds import UpstreamErrorKind


class UpstreamError(Exception):
    """A transport-level failure talking to a worker (connect, read timeout, cut stream)."""

    def __init__(self, kind: UpstreamErrorKind, detail: str) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.detail = detail
