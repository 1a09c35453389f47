"""vllm-omni deploy profiles: find, load, override and read the keys that matter.

A deploy profile is the YAML a real worker gets with ``--deploy-config``. The emulator
builds its timing model from it, the profile checker validates it and the supervisor
passes it on, so all three read it through this module and agree on what it says.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

# vLLM's cudagraph modes that capture the decode step as a full graph.
FULL_DECODE_GRAPH_MODES = frozenset({"FULL_DECODE_ONLY", "FULL", "FULL_AND_PIECEWISE"})

REPO_PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"


class ProfileError(ValueError):
    """A deploy profile that cannot be used; ``key`` is the dotted path at fault."""

    def __init__(self, source: str, key: str, reason: str) -> None:
        super().__init__(f"{source}: {key}: {reason}")
        self.source = source
        self.key = key
        self.reason = reason


def resolve_profile_path(name_or_path: str | Path) -> Path:
    """A path as given, else a bare file name in the repo's or the installed ``profiles/``.

    Mirrors vllm-omni, where a bare name resolves inside the package's ``deploy/`` folder.
    """
    candidate = Path(name_or_path)
    if candidate.exists():
        return candidate
    bare = candidate.name if candidate.suffix else f"{candidate.name}.yaml"
    for folder in _profile_dirs():
        found = folder / bare
        if found.exists():
            return found
    raise FileNotFoundError(f"deploy profile not found: {name_or_path}")


def _profile_dirs() -> list[Path]:
    dirs = [REPO_PROFILES_DIR]
    try:
        bundled = resources.files("gateway.bundled_profiles")
        dirs.append(Path(str(bundled)))
    except (ModuleNotFoundError, TypeError):
        pass
    return dirs


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; ``override`` wins. Neither input is modified."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_stage_overrides(raw: dict[str, Any], overrides: dict[str, Any] | str | None) -> dict[str, Any]:
    """Apply ``--stage-overrides`` (``{"0": {...}, "1": {...}}``) to each stage by ``stage_id``."""
    if not overrides:
        return raw
    if isinstance(overrides, str):
        try:
            overrides = json.loads(overrides)
        except json.JSONDecodeError as exc:
            raise ProfileError("--stage-overrides", "<json>", f"not valid JSON: {exc}") from exc
    if not isinstance(overrides, dict):
        raise ProfileError("--stage-overrides", "<json>", "must be an object keyed by stage id")
    result = copy.deepcopy(raw)
    stages = result.get("stages") or []
    by_id = {str(stage.get("stage_id")): index for index, stage in enumerate(stages)}
    for stage_id, values in overrides.items():
        if str(stage_id) not in by_id:
            raise ProfileError("--stage-overrides", str(stage_id), "no stage with this stage_id")
        if not isinstance(values, dict):
            raise ProfileError("--stage-overrides", str(stage_id), "must be an object of stage keys")
        index = by_id[str(stage_id)]
        stages[index] = deep_merge(stages[index], values)
    return result


@dataclass(frozen=True)
class StageSpec:
    """The keys of one stage that decide how it performs."""

    stage_id: int
    max_num_seqs: int
    enforce_eager: bool
    cudagraph_mode: str | None
    cudagraph_capture_sizes: tuple[int, ...]
    attention_backend: str | None
    use_trtllm_attention: bool | None
    max_num_batched_tokens: int | None
    max_tokens: int | None
    seed: int | None
    # Prompt plus generated tokens; a request's max_new_tokens replaces max_tokens (vllm-omni
    # tts_adapters/base.py apply_max_new_tokens), so this is the real bound. None: unset.
    max_model_len: int | None = None

    @property
    def decode_graphs(self) -> bool:
        """True when decode steps replay a captured full CUDA graph."""
        return not self.enforce_eager and (self.cudagraph_mode or "").upper() in FULL_DECODE_GRAPH_MODES


@dataclass(frozen=True)
class DeployProfile:
    """A parsed deploy profile (after overrides); ``raw`` keeps every key for the checker."""

    source: str
    raw: dict[str, Any]
    async_chunk: bool
    codec_streaming: bool
    codec_chunk_frames: int
    initial_codec_chunk_frames: int
    stages: tuple[StageSpec, ...]
    # Trailing de-delayed frames Stage 0 holds back from each non-final chunk (code2wav
    # needs them as right context); the final flush releases them. vllm-omni default 4.
    codec_right_holdback_frames: int = 4

    @property
    def talker(self) -> StageSpec:
        return self.stage(0)

    @property
    def code2wav(self) -> StageSpec:
        return self.stage(1)

    def stage(self, stage_id: int) -> StageSpec:
        for stage in self.stages:
            if stage.stage_id == stage_id:
                return stage
        raise ProfileError(self.source, f"stages[stage_id={stage_id}]", "missing")

    @property
    def streams_early(self) -> bool:
        """Audio leaves chunk by chunk; otherwise the whole clip arrives at the end."""
        return self.async_chunk and self.codec_streaming


def load_deploy_profile(
    name_or_path: str | Path, stage_overrides: dict[str, Any] | str | None = None
) -> DeployProfile:
    path = resolve_profile_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(str(path), "<yaml>", f"not valid YAML: {exc}") from exc
    return parse_deploy_profile(raw, source=str(path), stage_overrides=stage_overrides)


def parse_deploy_profile(
    raw: Any, source: str = "<profile>", stage_overrides: dict[str, Any] | str | None = None
) -> DeployProfile:
    if not isinstance(raw, dict):
        raise ProfileError(source, "<root>", "a deploy profile must be a mapping")
    raw = apply_stage_overrides(raw, stage_overrides)
    stages_raw = raw.get("stages")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise ProfileError(source, "stages", "must be a non-empty list of stages")
    stages = tuple(_parse_stage(source, index, stage) for index, stage in enumerate(stages_raw))
    ids = [stage.stage_id for stage in stages]
    if 0 not in ids or 1 not in ids:
        raise ProfileError(source, "stages", "Higgs needs stage 0 (talker) and stage 1 (code2wav)")
    extra = _connector_extra(source, raw)
    return DeployProfile(
        source=source,
        raw=raw,
        async_chunk=_typed(source, "async_chunk", raw.get("async_chunk", False), bool),
        codec_streaming=_typed(source, "connectors.*.extra.codec_streaming", extra.get("codec_streaming", False), bool),
        codec_chunk_frames=_positive(source, "connectors.*.extra.codec_chunk_frames", extra.get("codec_chunk_frames", 25)),
        initial_codec_chunk_frames=_positive(
            source, "connectors.*.extra.initial_codec_chunk_frames", extra.get("initial_codec_chunk_frames", 1)
        ),
        stages=stages,
        codec_right_holdback_frames=_non_negative(
            source, "connectors.*.extra.codec_right_holdback_frames", extra.get("codec_right_holdback_frames", 4)
        ),
    )


def _connector_extra(source: str, raw: dict[str, Any]) -> dict[str, Any]:
    connectors = raw.get("connectors") or {}
    if not isinstance(connectors, dict):
        raise ProfileError(source, "connectors", "must be a mapping of connector names")
    for name, connector in connectors.items():
        extra = (connector or {}).get("extra") if isinstance(connector, dict) else None
        if extra is None:
            continue
        if not isinstance(extra, dict):
            raise ProfileError(source, f"connectors.{name}.extra", "must be a mapping")
        return extra
    return {}


def _parse_stage(source: str, index: int, stage: Any) -> StageSpec:
    where = f"stages[{index}]"
    if not isinstance(stage, dict):
        raise ProfileError(source, where, "a stage must be a mapping")
    if "stage_id" not in stage:
        raise ProfileError(source, f"{where}.stage_id", "missing")
    compilation = stage.get("compilation_config") or {}
    if not isinstance(compilation, dict):
        raise ProfileError(source, f"{where}.compilation_config", "must be a mapping")
    sizes = compilation.get("cudagraph_capture_sizes") or []
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s > 0 for s in sizes):
        raise ProfileError(source, f"{where}.compilation_config.cudagraph_capture_sizes", "must be positive integers")
    attention = stage.get("attention_config") or {}
    if not isinstance(attention, dict):
        raise ProfileError(source, f"{where}.attention_config", "must be a mapping")
    sampling = stage.get("default_sampling_params") or {}
    if not isinstance(sampling, dict):
        raise ProfileError(source, f"{where}.default_sampling_params", "must be a mapping")
    mode = compilation.get("cudagraph_mode")
    return StageSpec(
        stage_id=_typed(source, f"{where}.stage_id", stage["stage_id"], int),
        max_num_seqs=_positive(source, f"{where}.max_num_seqs", stage.get("max_num_seqs")),
        enforce_eager=_typed(source, f"{where}.enforce_eager", stage.get("enforce_eager", False), bool),
        cudagraph_mode=str(mode) if mode is not None else None,
        cudagraph_capture_sizes=tuple(sorted(sizes)),
        attention_backend=stage.get("attention_backend"),
        use_trtllm_attention=attention.get("use_trtllm_attention"),
        max_num_batched_tokens=stage.get("max_num_batched_tokens"),
        max_tokens=sampling.get("max_tokens"),
        seed=sampling.get("seed"),
        max_model_len=_positive(source, f"{where}.max_model_len", stage["max_model_len"]) if "max_model_len" in stage else None,
    )


def _typed(source: str, key: str, value: Any, kind: type) -> Any:
    # bool is a subclass of int: an int field must not accept True/False silently.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProfileError(source, key, f"must be {kind.__name__}, got {value!r}")
    return value


def _non_negative(source: str, key: str, value: Any) -> int:
    value = _typed(source, key, value, int)
    if value < 0:
        raise ProfileError(source, key, f"must be >= 0, got {value}")
    return value


def _positive(source: str, key: str, value: Any) -> int:
    if value is None:
        raise ProfileError(source, key, "missing")
    _typed(source, key, value, int)
    if value <= 0:
        raise ProfileError(source, key, f"must be > 0, got {value}")
    return int(value)
