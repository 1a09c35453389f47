"""The replica-kill benchmark's accounting: audio counted when each chunk arrived, and the
survivors' failures told apart from the dead replica's lost requests."""

from __future__ import annotations

import argparse

from gateway.bench.client import RequestResult
from gateway.bench.replica_kill import BOUND_S, Run, Sent, _delivered, _report
from gateway.types.codec import BYTES_PER_SECOND


def _sent(replica: int, started_s: float, chunks: list[tuple[float, int]], error: str | None = None) -> Sent:
    result = RequestResult(None, 10, started_s, 200, error, "low_latency", 0.1, 1.0, sum(s for _, s in chunks))
    result.chunks = chunks
    return Sent(replica, started_s, result)


def test_audio_is_counted_in_the_window_its_chunk_arrived() -> None:
    run = Run(killed_at_s=10.0, sent=[_sent(0, 9.0, [(0.5, BYTES_PER_SECOND), (1.5, 2 * BYTES_PER_SECOND)])])
    assert _delivered(run, 9.0, 10.0, 1.0) == 1.0  # the first second of audio, before 10 s
    assert _delivered(run, 10.0, 11.0, 0.25) == 0.5  # two seconds at time scale 0.25, modelled


def test_the_report_judges_the_survivors_only() -> None:
    run = Run(killed_at_s=10.0, cleared_after_s={0: 3.1, 1: None})
    run.sent = [
        _sent(0, 1.0, [(6.0, BYTES_PER_SECOND)]),
        _sent(1, 12.0 + BOUND_S, [(1.0, BYTES_PER_SECOND)]),
        _sent(2, 9.0, [], error="transport:ServerDisconnectedError"),  # on the killed replica
    ]
    args = argparse.Namespace(concurrency=3, time_scale=1.0, before=10.0, after=10.0)
    report = _report(run, args, [1.0, 2.0])
    assert "| requests on the survivors that failed | 0 of 2 | 0 | yes |" in report
    assert "survivor 1's view after | 3.10 s | <= 4.0 s | yes |" in report
    assert "survivor 2's view after | not within the run | <= 4.0 s | **no** |" in report
    assert "killed replica lost: 1" in report
