"""What acceptance launches: three workers, one at a time, through the supervisor.

The low-latency profile twice (native FlashInfer decode, the profiles' pin, and the XQA path
vLLM picks on Hopper when ``attention_config.use_trtllm_attention`` is not false) and the
high-throughput profile. Real mode runs ``vllm-omni serve`` exactly as the gateway's
supervisor does (``VLLM_OMNI_COMMAND``); ``--emulate`` runs the worker emulator on the same
flags plus its time scale, so both modes go through one code path.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config import DEFAULT_MODEL, VLLM_OMNI_COMMAND, LaunchConfig
from gateway.worker.profile import load_deploy_profile, resolve_profile_path
from gateway.types import PoolName

LL_PROFILE = "higgs_multimodal_qwen3_low_latency.yaml"
HT_PROFILE = "higgs_multimodal_qwen3_high_throughput.yaml"
XQA_OVERRIDES: dict[str, Any] = {"0": {"attention_config": {"use_trtllm_attention": True}}}


@dataclass(frozen=True)
class Variant:
    name: str
    pool: PoolName
    profile: str
    decode_path: str  # what the report calls its Stage 0 decode attention
    stage_overrides: dict[str, Any] | None = None

    @property
    def profile_path(self) -> Path:
        return resolve_profile_path(self.profile).resolve()

    def max_concurrency(self) -> int:
        return load_deploy_profile(self.profile_path, self.stage_overrides).talker.max_num_seqs


LOW_LATENCY = Variant("low_latency", PoolName.LOW_LATENCY, LL_PROFILE, "FlashInfer (native)")
LOW_LATENCY_XQA = Variant("low_latency_xqa", PoolName.LOW_LATENCY, LL_PROFILE, "FlashInfer → TRT-LLM XQA", XQA_OVERRIDES)
HIGH_THROUGHPUT = Variant("high_throughput", PoolName.HIGH_THROUGHPUT, HT_PROFILE, "FlashInfer (native)")
VARIANTS = (LOW_LATENCY, LOW_LATENCY_XQA, HIGH_THROUGHPUT)


def emulator_command(time_scale: float) -> list[str]:
    """vllm-omni serve's flags, run by the emulator (``higgs-gateway emulate``). Its synthetic
    voice, not eSpeak: rendering 64 streams of speech would cost the client's cores, and
    the emulated timing is what is measured (the quality checks score either alike)."""
    return [
        sys.executable, "-m", "gateway", "emulate", *VLLM_OMNI_COMMAND[2:],
        "--time-scale", f"{time_scale:g}", "--synthetic-audio",
    ]  # fmt: skip


def launch_for(
    variant: Variant, *, gpu: str, emulate: bool, time_scale: float, model: str = DEFAULT_MODEL, start_timeout_s: float = 1800.0
) -> LaunchConfig:
    """The supervisor's launch section for one variant's worker on ``gpu``."""
    return LaunchConfig(
        gpus=[gpu],
        model=model,
        command=emulator_command(time_scale) if emulate else list(VLLM_OMNI_COMMAND),
        stage_overrides=variant.stage_overrides,
        start_timeout_s=start_timeout_s,
        restart_backoff_initial_s=0.5,
        restart_backoff_max_s=2.0,
    )
