"""The continuous-batching engine on a virtual clock: deterministic, no sleeping."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from gateway.worker.profile import DeployProfile, load_deploy_profile, parse_deploy_profile
from gateway.emulator.clock import VirtualClock
from gateway.emulator.engine import ChunkEvent, Engine, EngineRequest, RequestState
from gateway.worker.timing import StepModel, TimingParams


@dataclass
class RecordingObserver:
    steps: dict[int, int] = field(default_factory=dict)
    captures: list[int] = field(default_factory=list)

    def on_steps(self, batch_size: int, steps: int) -> None:
        self.steps[batch_size] = self.steps.get(batch_size, 0) + steps

    def on_capture(self, batch_size: int) -> None:
        self.captures.append(batch_size)


def make_engine(profile: DeployProfile, **kwargs: object) -> tuple[Engine, VirtualClock, RecordingObserver]:
    clock = VirtualClock()
    observer = RecordingObserver()
    engine = Engine(StepModel(profile), clock, observer=observer, **kwargs)  # type: ignore[arg-type]
    return engine, clock, observer


def request(name: str, frames: int, prompt_tokens: int = 80, overhead: float = 0.0) -> EngineRequest:
    return EngineRequest(request_id=name, prompt_tokens=prompt_tokens, total_frames=frames, overhead_seconds=overhead)


def run_until_idle(engine: Engine, clock: VirtualClock, limit: int = 100_000) -> tuple[list[ChunkEvent], int]:
    """Jump the clock from wake-up to wake-up; return the events and how many wake-ups it took."""
    events: list[ChunkEvent] = []
    wakeups = 0
    for _ in range(limit):
        events += engine.poll()
        wakeup = engine.next_wakeup()
        if wakeup is None:
            return events, wakeups
        clock.set(max(clock.now(), wakeup))
        wakeups += 1
    raise AssertionError("engine did not go idle")


def test_one_request_streams_the_real_chunk_pattern(low_latency: DeployProfile) -> None:
    engine, clock, _ = make_engine(low_latency)
    engine.submit(request("a", frames=80))
    events, _ = run_until_idle(engine, clock)
    assert [(e.first_frame, e.frames) for e in events] == [(0, 1), (1, 25), (26, 25), (51, 25), (76, 4)]
    assert [e.final for e in events] == [False, False, False, False, True]
    times = [e.ready_at for e in events]
    assert times == sorted(times)


def test_first_chunk_waits_for_prefill_the_codebook_delay_and_the_holdback(low_latency: DeployProfile) -> None:
    # higgs_audio_v3.py: talker2code2wav_async_chunk needs 7 + 4 + 1 = 12 decode steps.
    engine, clock, observer = make_engine(low_latency)
    model = engine.model
    engine.submit(request("a", frames=10, prompt_tokens=100))
    first = run_until_idle(engine, clock)[0][0]
    prefill = model.step(1, 100, 100, set()).seconds
    decode = model.step(1, 0, 100, set()).seconds
    delay = model.params.codebook_delay_steps
    assert delay + model.holdback_frames + 1 == 12
    expected = prefill + (delay + model.holdback_frames) * decode + model.code2wav_seconds(1)
    assert first.ready_at == pytest.approx(expected, rel=0.01)
    # Every frame costs one step, plus the codebook delay and the trimmed residual frame.
    assert observer.steps == {1: 10 + delay + 1}


def test_the_final_flush_releases_the_holdback(low_latency: DeployProfile) -> None:
    # 1-frame first chunk, 25-frame chunks while 4 frames of right context stay held back,
    # then the final flush delivers the rest (the held-back frames included).
    engine, clock, _ = make_engine(low_latency)
    engine.submit(request("a", frames=40))
    events, _ = run_until_idle(engine, clock)
    assert [(e.first_frame, e.frames, e.final) for e in events] == [(0, 1, False), (1, 25, False), (26, 14, True)]
    engine.submit(request("b", frames=28))  # 1 + 25 + 4 held back > 28: no second chunk before the end
    events, _ = run_until_idle(engine, clock)
    assert [(e.first_frame, e.frames, e.final) for e in events] == [(0, 1, False), (1, 27, True)]


def test_a_profile_without_async_chunk_sends_one_chunk_at_the_end() -> None:
    raw = copy.deepcopy(load_deploy_profile("higgs_multimodal_qwen3_low_latency.yaml").raw)
    raw["async_chunk"] = False
    engine, clock, _ = make_engine(parse_deploy_profile(raw, source="no-async-chunk"))
    engine.submit(request("a", frames=60))
    events, _ = run_until_idle(engine, clock)
    assert [(e.first_frame, e.frames, e.final) for e in events] == [(0, 60, True)]


def test_requests_beyond_max_num_seqs_wait_for_a_slot(low_latency: DeployProfile) -> None:
    engine, clock, observer = make_engine(low_latency)
    short = [request(f"s{i}", frames=30) for i in range(16)]
    late = [request(f"l{i}", frames=30) for i in range(4)]
    for r in short + late:
        engine.submit(r)
    clock.advance(0.001)
    engine.poll()
    # The first arrival started a step at once; the others queue for the next boundary.
    assert (engine.num_running, engine.num_waiting) == (1, 19)
    clock.advance(0.2)
    engine.poll()
    assert engine.num_running == 16
    assert engine.num_waiting == 4
    assert all(r.state is RequestState.WAITING for r in late)
    events, _ = run_until_idle(engine, clock)
    assert max(observer.steps) == 16  # never more than max_num_seqs in one step
    first_done = min(e.ready_at for e in events if e.final and e.request in short)
    for r in late:
        assert r.scheduled_at is not None and r.scheduled_at >= first_done - engine.model.code2wav_seconds(30)
        assert r.queue_wait is not None and r.queue_wait > 0
    assert all(r.state is RequestState.FINISHED for r in short + late)


def test_high_throughput_profile_runs_up_to_64(high_throughput: DeployProfile) -> None:
    engine, clock, _ = make_engine(high_throughput)
    for i in range(70):
        engine.submit(request(f"r{i}", frames=40))
    clock.advance(0.2)
    engine.poll()
    assert (engine.num_running, engine.num_waiting) == (64, 6)


def test_graph_profile_pads_to_the_next_captured_size(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    assert [model.padded_batch(b) for b in (1, 3, 5, 9, 16, 17)] == [1, 4, 8, 16, 16, None]
    params = model.params
    # Batch 3 replays the batch-4 graph: only the per-request work differs.
    three, four = model.step(3, 0, 0, set()).seconds, model.step(4, 0, 0, set()).seconds
    assert four - three == pytest.approx(params.gpu_per_seq_ms / 1000)
    # Batch 9 pads to 16.
    nine, sixteen = model.step(9, 0, 0, set()).seconds, model.step(16, 0, 0, set()).seconds
    assert sixteen - nine == pytest.approx(7 * params.gpu_per_seq_ms / 1000)


def test_steps_that_carry_a_prefill_run_without_the_decode_graph(low_latency: DeployProfile) -> None:
    model = StepModel(low_latency)
    decode = model.step(8, 0, 0, set()).seconds
    with_prefill = model.step(8, 1, 0, set()).seconds
    # One prompt token is nothing; losing the graph is what costs (op-by-op launch ~30 ms).
    assert with_prefill - decode > 0.015
    # Prefill cost grows with prompt length.
    assert model.step(8, 600, 0, set()).seconds > model.step(8, 60, 0, set()).seconds


def test_eager_profile_captures_its_local_graph_once_per_exact_batch_size(high_throughput: DeployProfile) -> None:
    engine, clock, observer = make_engine(high_throughput)
    engine.submit(request("a", frames=20))
    run_until_idle(engine, clock)
    assert observer.captures == [1]
    cold_steps_seen = dict(observer.steps)
    # A second request at the same batch size captures nothing new, so it runs faster.
    start = clock.now()
    engine.submit(request("b", frames=20))
    events, _ = run_until_idle(engine, clock)
    warm_latency = events[-1].ready_at - start
    assert observer.captures == [1]
    assert warm_latency < engine.model.params.mlp_graph_capture_ms / 1000
    # Three at once: each new size (3, then 2 as the first one finishes a step early) is
    # captured on first sight, and only once.
    for name in "cde":
        engine.submit(request(name, frames=20))
    run_until_idle(engine, clock)
    assert sorted(observer.captures) == [1, 2, 3]
    assert cold_steps_seen[1] > 0
    assert engine.captured == {1, 2, 3}


def test_graph_profile_never_captures_lazily(low_latency: DeployProfile) -> None:
    engine, clock, observer = make_engine(low_latency)
    for i in range(5):
        engine.submit(request(f"r{i}", frames=20))
    run_until_idle(engine, clock)
    assert observer.captures == []


def test_precaptured_sizes_skip_the_capture(high_throughput: DeployProfile) -> None:
    engine, clock, observer = make_engine(high_throughput, precaptured=range(1, 65))
    engine.submit(request("a", frames=20))
    run_until_idle(engine, clock)
    assert observer.captures == []


def test_abort_frees_the_slot_for_a_waiting_request() -> None:
    profile = load_deploy_profile("higgs_multimodal_qwen3_low_latency.yaml", {"0": {"max_num_seqs": 1}})
    engine, clock, _ = make_engine(profile)
    first, second = request("first", frames=2000), request("second", frames=10)
    engine.submit(first)
    engine.submit(second)
    clock.advance(0.5)
    engine.poll()
    assert (engine.num_running, engine.num_waiting) == (1, 1)
    engine.abort(first)
    assert first.state is RequestState.ABORTED
    assert engine.num_running == 0
    events, _ = run_until_idle(engine, clock)
    assert {e.request.request_id for e in events} == {"second"}
    assert second.scheduled_at is not None and second.scheduled_at < 0.6
    assert clock.now() < 2.0  # nowhere near the 80 s the aborted clip would have taken


def test_abort_of_a_waiting_or_pending_request_never_runs_it(low_latency: DeployProfile) -> None:
    engine, clock, observer = make_engine(low_latency)
    pending = request("pending", frames=10, overhead=0.05)
    engine.submit(pending)
    engine.abort(pending)
    events, _ = run_until_idle(engine, clock)
    assert events == [] and observer.steps == {}


def test_an_arrival_joins_a_running_batch_at_the_next_step(low_latency: DeployProfile) -> None:
    engine, clock, observer = make_engine(low_latency)
    engine.submit(request("a", frames=200))
    clock.advance(0.5)
    engine.poll()
    engine.submit(request("b", frames=20))
    events, _ = run_until_idle(engine, clock)
    b_first = next(e for e in events if e.request.request_id == "b")
    assert b_first.ready_at - 0.5 < 0.3  # TTFP, not the remaining seconds of "a"
    assert observer.steps.get(2, 0) >= 20  # both decoded together


def test_wakeups_scale_with_chunks_not_steps(low_latency: DeployProfile) -> None:
    engine, clock, observer = make_engine(low_latency)
    for i in range(16):
        engine.submit(request(f"r{i}", frames=2000 - i))
    events, wakeups = run_until_idle(engine, clock)
    steps = sum(observer.steps.values())
    assert steps > 2000
    # Each request has ~81 chunks; the engine wakes about twice per chunk boundary,
    # nowhere near once per step.
    assert wakeups < steps / 5
    assert len(events) == 16 * 81


def test_same_inputs_give_the_same_schedule(high_throughput: DeployProfile) -> None:
    def schedule() -> list[tuple[str, int, float]]:
        engine, clock, _ = make_engine(high_throughput)
        for i in range(10):
            engine.submit(request(f"r{i}", frames=30 + 7 * i, prompt_tokens=60 + i))
            clock.advance(0.013)
        events, _ = run_until_idle(engine, clock)
        return [(e.request.request_id, e.first_frame, e.ready_at) for e in events]

    assert schedule() == schedule()


def test_custom_params_change_the_model(low_latency: DeployProfile) -> None:
    slow = StepModel(low_latency, TimingParams(step_host_ms=50.0))
    fast = StepModel(low_latency)
    assert slow.step(1, 0, 0, set()).seconds > fast.step(1, 0, 0, set()).seconds + 0.04
