"""A worker's curve before it has served anything: derived from its deploy profile.

The profile says what shapes performance: full decode graphs or eager steps, the captured
batch sizes a decode pads up to, ``max_num_seqs``, the streaming chunk sizes. The step
costs come from the calibrated H200 step model the emulator runs on (``StepModel``), so
the prior is right on the hardware it was calibrated for and off by a roughly constant
factor elsewhere: exactly what the online correction in ``performance`` learns first.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping

from gateway.config import MeasuredCurve
from gateway.worker.profile import DeployProfile
from gateway.types import PoolName
from gateway.types.codec import FRAMES_PER_SECOND
from gateway.types.curve import Curve
from gateway.worker.timing import StepModel, TimingParams

# What an average request looks like to the prior: ~8 s of audio, ~110 prompt tokens.
TYPICAL_FRAMES = 200
TYPICAL_PROMPT_TOKENS = 110


def prior_curve(
    profile: DeployProfile,
    params: TimingParams | None = None,
    typical_frames: int = TYPICAL_FRAMES,
    prompt_tokens: int = TYPICAL_PROMPT_TOKENS,
) -> Curve:
    """Steady-state step time and TTFP at every load from 1 to ``max_num_seqs``.

    At load ``n`` in steady state a new request arrives every ``(frames + delay) / n``
    steps, and the step that admits it carries its prefill (on a graph profile that step
    runs op by op: the reason low-latency workers slow down under churn). The predicted
    step is the mix of the two, weighted by how often each happens.
    """
    model = StepModel(profile, params)
    delay = model.params.codebook_delay_steps
    all_sizes = set(range(1, model.max_num_seqs + 1))  # a warmed worker: every graph exists
    steps: list[float] = []
    ttfps: list[float] = []
    for load in range(1, model.max_num_seqs + 1):
        context = load * (prompt_tokens + typical_frames // 2)
        decode = model.step(load, 0, context, all_sizes).seconds
        prefill = model.step(load, prompt_tokens, context, all_sizes).seconds
        churn = min(1.0, load / (typical_frames + delay))
        step = (1.0 - churn) * decode + churn * prefill
        steps.append(step)
        first_chunk = model.initial_chunk_frames if model.streams_early else typical_frames
        # Decode steps before the first chunk can leave: the codebook delay, the chunk, and
        # the frames Stage 1 holds back on its right (vllm-omni 0.30.0 async chunking).
        steps_to_first = delay + first_chunk + (model.holdback_frames if model.streams_early else 0)
        ttfps.append(
            model.overhead_seconds()
            + 0.5 * step  # the step in progress when the request reaches the scheduler
            + prefill
            + (steps_to_first - 1) * step
            + model.code2wav_seconds(first_chunk)
        )
    return Curve(tuple(_running_max(steps)), tuple(_running_max(ttfps)))


def _running_max(values: list[float]) -> list[float]:
    out: list[float] = []
    for value in values:
        out.append(max(value, out[-1]) if out else value)
    return out


def pool_priors(profiles: Mapping[PoolName, DeployProfile]) -> dict[PoolName, Curve]:
    """Each pool's prior, from its deploy profile (with the pool's stage overrides)."""
    return {name: prior_curve(profile) for name, profile in profiles.items()}


def measured_prior(base: Curve, measured: MeasuredCurve) -> Curve:
    """``base`` corrected to what ``tune`` measured: exact at measured loads, the profile's
    shape between and beyond them (the correction is interpolated in log space)."""
    steps = _corrected(base.step_s, {load: rtf / FRAMES_PER_SECOND for load, rtf in measured.rtf.items()})
    ttfps = _corrected(base.ttfp_s, dict(measured.ttfp_s))
    return Curve(tuple(_running_max(steps)), tuple(_running_max(ttfps)))


def with_measured(priors: Mapping[PoolName, Curve], measured: Mapping[PoolName, MeasuredCurve]) -> dict[PoolName, Curve]:
    return {pool: measured_prior(curve, measured[pool]) if pool in measured else curve for pool, curve in priors.items()}


def _corrected(base: tuple[float, ...], points: dict[int, float]) -> list[float]:
    size = len(base)
    known = sorted((load, math.log(value / base[load - 1])) for load, value in points.items() if load <= size)
    if not known:
        return list(base)
    loads = [load for load, _ in known]
    out = []
    for load in range(1, size + 1):
        index = bisect.bisect_left(loads, load)
        if index == 0:
            ratio = known[0][1]
        elif index == len(known):
            ratio = known[-1][1]
        else:
            (lo, a), (hi, b) = known[index - 1], known[index]
            ratio = a + (b - a) * (load - lo) / (hi - lo)
        out.append(base[load - 1] * math.exp(ratio))
    return out
