"""The relay over a fake transport: every failure before the first byte, retries, the lease."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.config import UpstreamConfig
from gateway.errors import GatewayError
from gateway.pools.lease import Lease
from gateway.types import PoolName, SlaClass, WorkerState
from gateway.types.codec import BYTES_PER_FRAME, FRAMES_PER_SECOND
from gateway.types.decision import Action, Decision
from gateway.types.error_kinds import UpstreamErrorKind
from gateway.types.observations import StreamOutcome
from gateway.types.reservation import Reservation
from gateway.types.view import RequestInfo
from gateway.upstream.errors import UpstreamError
from gateway.upstream.events import HealthReports
from gateway.upstream.relay import Relay
from tests.unit.upstream.fakes import HANG, HT_URL, LL2_URL, LL_URL, FakeResponse, FakeTransport, RecordingLog, cut, ready_fleet

PAYLOAD: dict[str, Any] = {"model": "m", "input": "hi"}
INFO = RequestInfo(SlaClass.BALANCED, None, 2)
TO_LL0 = Decision(Action.ROUTE, "balanced_under_threshold", PoolName.LOW_LATENCY, "ll-0")
AUDIO = b"\x01\x00" * 100


def relay_over(tmp_path: Path, script: dict[str, list[Any]], **upstream: Any) -> tuple[Relay, FakeTransport, RecordingLog, Any]:
    fleet, admission = ready_fleet(tmp_path, upstream=upstream)
    transport = FakeTransport(script)
    observer = RecordingLog()
    relay = Relay(transport, (HealthReports(fleet.health),), admission, UpstreamConfig(**upstream))
    return relay, transport, observer, fleet


def on_ll0(fleet: Any) -> Reservation[Lease]:
    """What admission hands the pipeline: the decision and its slot, already held."""
    return Reservation(TO_LL0, fleet.leases.lease("ll-0"))


def inflight(fleet: Any) -> dict[str, int]:
    return {w.worker_id: w.inflight for w in fleet.view.workers}


async def streamed_to_the_end(relay: Relay, fleet: Any, observer: RecordingLog) -> Any:
    """One stream to ll-0 read to its end and closed: what the performance model is told."""
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert stream.rest is not None
    async for chunk in stream.rest:
        stream.pace.add(len(chunk))
    await stream.close(StreamOutcome.COMPLETED)
    [seen] = observer.streams
    return seen


async def test_a_healthy_stream_holds_one_lease_until_closed(tmp_path: Path) -> None:
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(200, [b"", AUDIO, AUDIO])]})
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert stream.first_chunk == AUDIO and stream.attempts == 1
    assert inflight(fleet) == {"ll-0": 1, "ll-1": 0, "ht-0": 0}
    assert stream.rest is not None
    async for chunk in stream.rest:
        stream.pace.add(len(chunk))
    await stream.close(StreamOutcome.COMPLETED)
    await stream.close(StreamOutcome.COMPLETED)  # idempotent
    assert inflight(fleet) == {"ll-0": 0, "ll-1": 0, "ht-0": 0}
    [seen] = observer.streams
    assert (seen.worker_id, seen.load_at_dispatch, seen.bytes) == ("ll-0", 1, 2 * len(AUDIO))
    assert seen.outcome is StreamOutcome.COMPLETED and seen.ttfp_s is not None


async def test_with_the_fleet_view_shared_a_stream_is_learned_at_every_replicas_load(tmp_path: Path) -> None:
    """Learned at this replica's own leases alone, each of K replicas filed what the worker
    did at load L under about L / K: its curves made every load look slower than it was."""
    second = b"\x00" * BYTES_PER_FRAME * FRAMES_PER_SECOND
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(200, [b"", second, second, second])]})
    next(w for w in fleet.view.workers if w.worker_id == "ll-0").apply_fleet_leases(3)  # three of other replicas
    seen = await streamed_to_the_end(relay, fleet, observer)
    assert seen.load_at_dispatch == 4  # theirs and this one
    assert seen.pace and all(sample.load == 4 for sample in seen.pace)  # its pace at the same load


@pytest.mark.parametrize(
    "first_answer, kind, reason",
    [
        (FakeResponse(500, body=b'{"error": {"message": "boom"}}'), "status_5xx", "status_5xx"),
        (FakeResponse(503, body=b"starting"), "status_5xx", "status_5xx"),
        (UpstreamError(UpstreamErrorKind.CONNECT, "refused"), "connect", "connect"),
        (FakeResponse(200, []), "stream_error", "stream_error"),  # ended without audio
        (FakeResponse(200, [b"", cut()]), "stream_error", "stream_error"),  # cut before the first byte
        (FakeResponse(200, [UpstreamError(UpstreamErrorKind.READ_TIMEOUT, "silent")]), "first_byte_timeout", "first_byte_timeout"),
    ],
)
async def test_failures_before_the_first_byte_retry_on_another_worker_of_the_same_pool(
    tmp_path: Path, first_answer: Any, kind: str, reason: str
) -> None:
    relay, transport, observer, fleet = relay_over(
        tmp_path, {LL_URL: [first_answer], LL2_URL: [FakeResponse(200, [AUDIO])]}
    )
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert transport.calls == [LL_URL, LL2_URL]
    assert stream.worker.worker_id == "ll-1" and stream.attempts == 2
    assert stream.decision.reason == "retry_other_worker"
    assert observer.error_kinds == [("low_latency", kind)]
    assert observer.retries == [reason]  # a cut or empty stream is not counted as a 5xx
    assert inflight(fleet) == {"ll-0": 0, "ll-1": 1, "ht-0": 0}
    assert [s.outcome for s in observer.streams] == [StreamOutcome.RETRIED]
    # Both placements are logged for the recorder: the first, then admission's retry.
    assert [(d.worker_id, d.reason) for d in observer.decisions] == [("ll-0", TO_LL0.reason), ("ll-1", "retry_other_worker")]
    assert all(r.closed for r in transport.responses[:-1])
    await stream.close(StreamOutcome.COMPLETED)
    assert inflight(fleet) == {"ll-0": 0, "ll-1": 0, "ht-0": 0}


async def test_a_first_byte_timeout_is_retried_and_reported(tmp_path: Path) -> None:
    relay, _, observer, fleet = relay_over(
        tmp_path, {LL_URL: [HANG], LL2_URL: [FakeResponse(200, [AUDIO])]}, first_byte_timeout_s=0.01
    )
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert stream.worker.worker_id == "ll-1"
    assert observer.error_kinds == [("low_latency", "first_byte_timeout")] and observer.retries == ["first_byte_timeout"]
    await stream.close(StreamOutcome.COMPLETED)


@pytest.mark.parametrize(
    "answer, status, code",
    [
        (FakeResponse(500), 502, "upstream_error"),
        (FakeResponse(503), 503, "upstream_unavailable"),
        (FakeResponse(200, [cut()]), 502, "upstream_error"),
        (FakeResponse(200, [UpstreamError(UpstreamErrorKind.READ_TIMEOUT, "silent")]), 504, "upstream_timeout"),
    ],
)
async def test_when_every_attempt_fails_the_client_gets_one_error_and_no_lease_is_left(
    tmp_path: Path, answer: Any, status: int, code: str
) -> None:
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [answer]}, retries=0)
    with pytest.raises(GatewayError) as caught:
        await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert (caught.value.status, caught.value.code) == (status, code)
    assert observer.retries == []
    assert [s.outcome for s in observer.streams] == [StreamOutcome.ERROR]
    assert inflight(fleet) == {"ll-0": 0, "ll-1": 0, "ht-0": 0}


async def test_a_worker_4xx_is_the_clients_error_and_never_retried(tmp_path: Path) -> None:
    body = b'{"error": {"message": "seed 12 is not allowed here", "param": "seed"}}'
    relay, transport, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(400, body=body)]})
    with pytest.raises(GatewayError) as caught:
        await relay.open(on_ll0(fleet), INFO, {**PAYLOAD, "seed": 12}, observer)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, "seed", "rejected_by_worker")
    assert "not allowed here" not in caught.value.message, "the worker's words stay in the log"
    assert "not allowed here" in (caught.value.log_detail or "") and "ll-0" in (caught.value.log_detail or "")
    assert transport.calls == [LL_URL] and observer.error_kinds == [("low_latency", "status_4xx")]
    worker = fleet.members.get("ll-0")
    assert worker.consecutive_failures == 0 and worker.last_error is None  # the request's, not the worker's


async def test_a_worker_that_lost_a_registered_voice_is_retried_elsewhere_and_prepared_again(tmp_path: Path) -> None:
    # The gateway only names voices it registered: the worker restarted unseen, not the client's fault.
    body = b'{"error": {"message": "Unknown voice \'anna\'. Upload a voice first", "param": "voice"}}'
    relay, transport, observer, fleet = relay_over(
        tmp_path, {LL_URL: [FakeResponse(400, body=body)], LL2_URL: [FakeResponse(200, [AUDIO])]}
    )
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert transport.calls == [LL_URL, LL2_URL] and stream.worker.worker_id == "ll-1"
    assert observer.error_kinds == [("low_latency", "voice_missing")] and observer.retries == ["voice_missing"]
    lost = fleet.members.get("ll-0")
    assert not lost.routable and lost.restarts == 1  # unroutable until its voices are replayed
    await stream.close(StreamOutcome.COMPLETED)


async def test_503_never_counts_toward_ejection_and_502_does(tmp_path: Path) -> None:
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(503), FakeResponse(502)]}, retries=0)
    for _ in range(2):
        with pytest.raises(GatewayError):
            await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert fleet.members.get("ll-0").consecutive_failures == 1


GENERATION_FAILED = b'{"error": {"message": "Speech generation failed: something odd", "code": 500}}'


async def test_a_500_counts_against_the_worker_once_another_worker_served_the_request(tmp_path: Path) -> None:
    relay, _, observer, fleet = relay_over(
        tmp_path, {LL_URL: [FakeResponse(500, body=GENERATION_FAILED)], LL2_URL: [FakeResponse(200, [AUDIO])]}
    )
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert stream.worker.worker_id == "ll-1" and observer.retries == ["status_5xx"]
    assert fleet.members.get("ll-0").consecutive_failures == 1, "the request was fine: the 500 was the worker's"
    assert any("something odd" in line for line in stream.hidden_failures)
    await stream.close(StreamOutcome.COMPLETED)


async def test_a_500_nothing_else_could_settle_counts_against_nobody(tmp_path: Path) -> None:
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(500, body=GENERATION_FAILED)]}, retries=0)
    with pytest.raises(GatewayError) as caught:
        await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert (caught.value.status, caught.value.code) == (502, "upstream_error")
    assert fleet.members.get("ll-0").consecutive_failures == 0


ENGINE_DEAD = (
    b'{"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.", '
    b'"type": "InternalServerError", "param": null, "code": 500, "request_id": null, "error_stage_id": 0}}'
)
# Every failure that reached the worker and may follow the request, as the fake answers it.
FOLLOWING_FAILURES = {
    "500": lambda: FakeResponse(500, body=GENERATION_FAILED),
    "empty_200": lambda: FakeResponse(200, [b""]),
    "cut_before_audio": lambda: FakeResponse(200, [b"", cut("Response payload is not completed")]),
    "silence": lambda: HANG,
    "engine_dead": lambda: FakeResponse(500, body=ENGINE_DEAD),
}


@pytest.mark.parametrize(
    ("failure", "status", "code", "param"),
    [
        ("500", 400, "unservable_request", None),
        ("empty_200", 400, "no_audio", "max_new_tokens"),
        ("cut_before_audio", 400, "unservable_request", None),
        ("silence", 504, "upstream_timeout", None),  # the fleet's answer: slow is not wrong
    ],
)
async def test_the_same_failure_on_a_second_worker_is_the_requests_and_ejects_nobody(
    tmp_path: Path, failure: str, status: int, code: str, param: str | None
) -> None:
    answer = FOLLOWING_FAILURES[failure]
    relay, transport, observer, fleet = relay_over(
        tmp_path, {url: [answer() for _ in range(3)] for url in (LL_URL, LL2_URL, HT_URL)}, retries=2,
        first_byte_timeout_s=0.05,
    )  # fmt: skip
    payload = {**PAYLOAD, "max_new_tokens": 9}
    for _ in range(3):  # as many as would eject a worker whose fault it was
        with pytest.raises(GatewayError) as caught:
            await relay.open(on_ll0(fleet), INFO, payload, observer)
        error = caught.value
        assert (error.status, error.code, error.param) == (status, code, param)
        assert "ll-0" not in error.message and "something odd" not in error.message
        assert "ll-0" in (error.log_detail or "") and "ll-1" in (error.log_detail or "")
    assert transport.calls == [LL_URL, LL2_URL] * 3, "a second worker settles it: no third attempt"
    assert [kind for _, kind in observer.errors][1::2] == ["request_fault"] * 3
    for worker in fleet.members.workers:
        assert (worker.consecutive_failures, worker.state.value, worker.last_error) == (0, "ready", None)
    assert inflight(fleet) == {"ll-0": 0, "ll-1": 0, "ht-0": 0}


async def test_a_worker_whose_engine_died_is_out_of_routing_at_once_and_the_request_served_elsewhere(tmp_path: Path) -> None:
    relay, transport, observer, fleet = relay_over(
        tmp_path, {LL_URL: [FakeResponse(500, body=ENGINE_DEAD)], LL2_URL: [FakeResponse(200, [AUDIO])]}
    )
    ejections: list[str] = []
    fleet.events.on_ejection(lambda worker, reason: ejections.append(f"{worker.worker_id} {reason}"))
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert stream.worker.worker_id == "ll-1" and transport.calls == [LL_URL, LL2_URL]
    assert fleet.members.get("ll-0").state is WorkerState.EJECTED
    assert ejections == ["ll-0 engine_dead"], "at once: one answer, not eject_after_failures of them"
    await stream.close(StreamOutcome.COMPLETED)


async def test_two_dead_engines_cost_two_attempts_a_502_and_no_count(tmp_path: Path) -> None:
    dead = [FakeResponse(500, body=ENGINE_DEAD)]
    relay, transport, observer, fleet = relay_over(tmp_path, {LL_URL: dead, LL2_URL: list(dead), HT_URL: []}, retries=2)
    with pytest.raises(GatewayError) as caught:
        await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert (caught.value.status, caught.value.code) == (502, "upstream_error")  # the fleet's trouble
    assert transport.calls == [LL_URL, LL2_URL], "a second worker settles it: no third attempt"
    for worker_id in ("ll-0", "ll-1"):
        # Not blame (nothing counted): a worker that said its engine died serves nothing more.
        worker = fleet.members.get(worker_id)
        assert (worker.consecutive_failures, worker.state) == (0, WorkerState.EJECTED)
    assert fleet.members.get("ht-0").state is WorkerState.READY


@pytest.mark.parametrize(
    "first_failure", ["cut_before_audio", "500", "empty_200"],
)
async def test_a_refusal_right_after_a_failed_request_ejects_at_once(tmp_path: Path, first_failure: str) -> None:
    refused = UpstreamError(UpstreamErrorKind.CONNECT, "Cannot connect to host ll-0.test:80 [Connection refused]")
    relay, _, observer, fleet = relay_over(
        tmp_path,
        {LL_URL: [FOLLOWING_FAILURES[first_failure](), refused], LL2_URL: [FakeResponse(200, [AUDIO]), FakeResponse(200, [AUDIO])]},
    )  # fmt: skip
    for _ in range(2):  # the released worker cuts what it had, then stops listening
        stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
        assert stream.worker.worker_id == "ll-1"
        await stream.close(StreamOutcome.COMPLETED)
    assert fleet.members.get("ll-0").state is WorkerState.EJECTED


async def test_a_refusal_alone_counts_as_one_failure(tmp_path: Path) -> None:
    refused = UpstreamError(UpstreamErrorKind.CONNECT, "Connection refused")
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [refused], LL2_URL: [FakeResponse(200, [AUDIO])]})
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    await stream.close(StreamOutcome.COMPLETED)
    worker = fleet.members.get("ll-0")
    assert (worker.state, worker.consecutive_failures) == (WorkerState.READY, 1)


@pytest.mark.parametrize("failure", sorted(FOLLOWING_FAILURES))
async def test_a_failure_another_worker_hid_counts_against_the_first_worker(tmp_path: Path, failure: str) -> None:
    relay, _, observer, fleet = relay_over(
        tmp_path, {LL_URL: [FOLLOWING_FAILURES[failure]()], LL2_URL: [FakeResponse(200, [AUDIO])]}, first_byte_timeout_s=0.05
    )
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert stream.worker.worker_id == "ll-1"
    first = fleet.members.get("ll-0")
    if failure == "engine_dead":  # out already: counting it changes nothing
        assert first.state is WorkerState.EJECTED and first.last_error
    else:
        assert first.consecutive_failures == 1 and first.last_error, "the request was fine: the failure was the worker's"
    await stream.close(StreamOutcome.COMPLETED)


@pytest.mark.parametrize("failure", sorted(FOLLOWING_FAILURES))
async def test_a_failure_nothing_else_could_settle_counts_against_nobody(tmp_path: Path, failure: str) -> None:
    relay, _, observer, fleet = relay_over(
        tmp_path, {LL_URL: [FOLLOWING_FAILURES[failure]()]}, retries=0, first_byte_timeout_s=0.05
    )
    with pytest.raises(GatewayError) as caught:
        await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert caught.value.status in (502, 504)
    assert fleet.members.get("ll-0").consecutive_failures == 0


async def test_a_different_failure_on_the_second_worker_lets_a_third_settle_both(tmp_path: Path) -> None:
    relay, transport, observer, fleet = relay_over(
        tmp_path,
        {LL_URL: [FakeResponse(200, [cut()])], LL2_URL: [FakeResponse(500, body=GENERATION_FAILED)], HT_URL: [FakeResponse(200, [AUDIO])]},
        retries=2,
    )
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert transport.calls == [LL_URL, LL2_URL, HT_URL]
    assert [fleet.members.get(w).consecutive_failures for w in ("ll-0", "ll-1", "ht-0")] == [1, 1, 0]
    await stream.close(StreamOutcome.COMPLETED)


async def test_a_reference_url_the_worker_could_not_fetch_is_a_400_at_once(tmp_path: Path) -> None:
    said = b'{"error": {"message": "Speech generation failed: Cannot connect to host clips.example:443 ssl:default", "code": 500}}'
    relay, transport, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(500, body=said)]})
    with pytest.raises(GatewayError) as caught:
        await relay.open(on_ll0(fleet), INFO, {**PAYLOAD, "ref_audio": "https://clips.example/a.wav"}, observer)
    error = caught.value
    assert (error.status, error.param, error.code) == (400, "ref_audio", "ref_audio_unreachable")
    assert transport.calls == [LL_URL] and observer.retries == [], "not retried: another worker would fail alike"
    assert observer.error_kinds == [("low_latency", "request_fault")]
    assert fleet.members.get("ll-0").consecutive_failures == 0 and fleet.members.get("ll-0").last_error is None


async def test_cancelling_while_waiting_for_the_worker_releases_the_lease(tmp_path: Path) -> None:
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(200, [HANG])]})
    task = asyncio.ensure_future(relay.open(on_ll0(fleet), INFO, PAYLOAD, observer))
    for _ in range(5):
        await asyncio.sleep(0)
    assert inflight(fleet)["ll-0"] == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert inflight(fleet)["ll-0"] == 0
    assert [s.outcome for s in observer.streams] == [StreamOutcome.CLIENT_DISCONNECTED]


async def test_a_retry_never_goes_back_to_a_tried_worker(tmp_path: Path) -> None:
    relay, transport, observer, fleet = relay_over(
        tmp_path, {LL_URL: [FakeResponse(502)], LL2_URL: [FakeResponse(502)], HT_URL: [FakeResponse(200, [AUDIO])]}, retries=2
    )
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert transport.calls == [LL_URL, LL2_URL, HT_URL] and stream.attempts == 3
    await stream.close(StreamOutcome.COMPLETED)


async def test_a_stream_cut_after_audio_blames_the_worker_without_retrying(tmp_path: Path) -> None:
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(200, [AUDIO, cut()])]})
    stream = await relay.open(on_ll0(fleet), INFO, PAYLOAD, observer)
    assert stream.rest is not None
    with pytest.raises(UpstreamError) as caught:
        await anext(stream.rest)
    assert stream.failed_mid_stream(caught.value) is UpstreamErrorKind.STREAM_ERROR
    await stream.close(StreamOutcome.CUT)
    assert observer.error_kinds == [("low_latency", "stream_error")] and observer.retries == []
    assert fleet.members.get("ll-0").consecutive_failures == 1 and inflight(fleet)["ll-0"] == 0


async def test_the_stream_pace_is_measured_for_the_performance_model(tmp_path: Path) -> None:
    second = b"\x00" * 48000  # 25 frames: one second of audio, 25 decode steps
    chunks = [b"\x00" * 1920, second[:30000], second[30000:], second, b"\x00" * 10]
    relay, _, observer, fleet = relay_over(tmp_path, {LL_URL: [FakeResponse(200, chunks)]})
    seen = await streamed_to_the_end(relay, fleet, observer)
    assert seen.bytes == 1920 + 2 * 48000 + 10 and seen.ttfp_s is not None
    # One sample per second of audio, whatever the read sizes, tagged with our load there.
    assert [(s.load, s.frames) for s in seen.pace] == [(1, 25), (1, 25)]
    assert (seen.outcome, seen.load_at_dispatch) == (StreamOutcome.COMPLETED, 1)
