"""A worker as the quality judge sees it: state, and the quality record it keeps."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.types import WorkerState


@dataclass
class FakeWorker:
    worker_id: str = "high_throughput-0"
    state: WorkerState = WorkerState.READY
    state_since: float = 0.0
    quality: dict[str, object] | None = None

    def record_quality(self, quality: dict[str, object]) -> None:
        self.quality = quality

    def note_quality(self, key: str, value: object) -> None:
        if self.quality is not None:
            self.quality[key] = value
