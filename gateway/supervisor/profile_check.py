"""``higgs-gateway profiles check [FILE...]``: the rules that keep Higgs-Audio fast and correct.

Each rule exists because breaking it degrades the model silently: the worker still starts
and answers, just slower (wrong attention kernel, no decode graph) or with the whole clip
arriving at once (no streaming). The gateway runs the same checks at start-up on the
profiles of the pools it supervises and refuses to start on an error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from gateway.worker.profile import DeployProfile, ProfileError, load_deploy_profile
from gateway.help_format import HelpFormatter
from gateway.types import PoolName

COMMITTED_PROFILES: tuple[str, ...] = (
    "higgs_multimodal_qwen3.yaml",
    "higgs_multimodal_qwen3_low_latency.yaml",
    "higgs_multimodal_qwen3_high_throughput.yaml",
)
LOW_LATENCY_GRAPH_MODE = "FULL_DECODE_ONLY"
# The shape of each profile vllm-omni 0.30.0 ships: (decode graphs, Stage 0 max_num_seqs,
# Stage 1 max_num_seqs, initial chunk frames, chunk frames, right hold-back frames). Any
# other shape that passes every rule is valid but unmeasured here, e.g. upstream's newer
# high-throughput layout (decode graphs, 64 sequences on both stages, 75-frame chunks).
SHIPPED_SHAPES = frozenset({
    (True, 16, 16, 1, 25, 4),  # low latency
    (False, 64, 16, 1, 25, 4),  # high throughput
    (False, 16, 16, 1, 25, 4),  # the default profile
})  # fmt: skip
# The shipped low-latency profile's batch: a graph profile running more is throughput-sized.
LOW_LATENCY_MAX_SEQS = 16


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One broken rule: which file, which key (dotted path), why it matters."""

    source: str
    key: str
    reason: str
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        return f"{self.source}: {self.severity}: {self.key}: {self.reason}"


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(finding.severity is Severity.ERROR for finding in findings)


def is_low_latency(profile: DeployProfile) -> bool:
    """A low-latency profile decodes through vLLM's CUDA graphs (Stage 0 not eager)."""
    return not profile.talker.enforce_eager


def check_profile(profile: DeployProfile, role: PoolName | None = None) -> list[Finding]:
    """Every rule on one parsed profile; ``role`` adds "this pool needs this kind of profile"."""
    rules = _Rules(profile)
    rules.attention()
    if is_low_latency(profile):
        rules.decode_graph()
    else:
        rules.no_decode_graph()
    rules.code2wav_eager()
    rules.streaming()
    if role is not None:
        rules.role(role)
    if not has_errors(rules.findings):
        rules.unknown_shape()
    return rules.findings


def shape(profile: DeployProfile) -> tuple[bool, int, int, int, int, int]:
    return (
        profile.talker.decode_graphs,
        profile.talker.max_num_seqs,
        profile.code2wav.max_num_seqs,
        profile.initial_codec_chunk_frames,
        profile.codec_chunk_frames,
        profile.codec_right_holdback_frames,
    )


def describe(profile: DeployProfile) -> str:
    """One line on what a profile does, in the terms the rules and the emulator use."""
    talker = profile.talker
    if talker.decode_graphs:
        sizes = talker.cudagraph_capture_sizes
        path = f"{talker.cudagraph_mode} decode graphs (captured up to {max(sizes) if sizes else 'vLLM default'})"
    else:
        path = "eager Stage 0 with Higgs' lazily captured local MLP graph"
    streaming = (
        f"audio in a {profile.initial_codec_chunk_frames}-frame first chunk, then {profile.codec_chunk_frames}-frame "
        f"chunks, {profile.codec_right_holdback_frames} frames held back"
        if profile.streams_early
        else "audio in one piece at the end"
    )
    return (
        f"{path}; Stage 0 runs up to {talker.max_num_seqs} requests, Stage 1 {profile.code2wav.max_num_seqs}; {streaming}"
    )


def check_file(path: str | Path, role: PoolName | None = None) -> list[Finding]:
    """Load and check one file; a file that does not parse is one error finding."""
    try:
        profile = load_deploy_profile(path)
    except ProfileError as exc:
        return [Finding(exc.source, exc.key, exc.reason)]
    except OSError as exc:
        return [Finding(str(path), "<file>", str(exc))]
    return check_profile(profile, role)


class _Rules:
    """Collects findings; key paths point into the file as written (``stages[i]`` = list index)."""

    def __init__(self, profile: DeployProfile) -> None:
        self.profile = profile
        self.findings: list[Finding] = []
        self.talker = profile.talker
        self.t = _stage_path(profile.raw, 0)

    def _add(self, key: str, reason: str, severity: Severity = Severity.ERROR) -> None:
        self.findings.append(Finding(self.profile.source, key, reason, severity))

    def attention(self) -> None:
        if str(self.talker.attention_backend or "").upper() != "FLASHINFER":
            self._add(
                f"{self.t}.attention_backend",
                f"must be FLASHINFER (got {self.talker.attention_backend!r}): the serving profiles "
                "are tuned and measured on it (TRITON_ATTN is only the ROCm fallback)",
            )
        if self.talker.use_trtllm_attention is not False:
            self._add(
                f"{self.t}.attention_config.use_trtllm_attention",
                f"must be false (got {self.talker.use_trtllm_attention!r}): otherwise FlashInfer "
                "may route Hopper decode to the TRT-LLM XQA kernel, slower for BF16 q_len=1 "
                "(higher TTFP and RTF)",
            )

    def decode_graph(self) -> None:
        compilation = f"{self.t}.compilation_config"
        mode = self.talker.cudagraph_mode
        if (mode or "").upper() != LOW_LATENCY_GRAPH_MODE:
            self._add(
                f"{compilation}.cudagraph_mode",
                f"a low-latency profile (enforce_eager: false) must pin {LOW_LATENCY_GRAPH_MODE} "
                f"(got {mode!r}): only full decode graphs remove the launch overhead it exists for",
            )
        sizes = self.talker.cudagraph_capture_sizes
        max_seqs = self.talker.max_num_seqs
        if not sizes or max(sizes) < max_seqs:
            self._add(
                f"{compilation}.cudagraph_capture_sizes",
                f"must cover max_num_seqs={max_seqs} (largest size {max(sizes) if sizes else None}): "
                "batches larger than every captured size decode without the graph",
            )

    def no_decode_graph(self) -> None:
        compilation = f"{self.t}.compilation_config"
        why = (
            "a high-throughput profile (enforce_eager: true) keeps Higgs' local MLP graph; "
            "vLLM's decode graph is the other, mutually exclusive path: remove it"
        )
        if self.talker.cudagraph_mode is not None:
            self._add(f"{compilation}.cudagraph_mode", why)
        if self.talker.cudagraph_capture_sizes:
            self._add(f"{compilation}.cudagraph_capture_sizes", why)

    def code2wav_eager(self) -> None:
        if not self.profile.code2wav.enforce_eager:
            self._add(
                f"{_stage_path(self.profile.raw, 1)}.enforce_eager",
                "Stage 1 (code2wav) must stay eager (enforce_eager: true), as every vllm-omni "
                "profile ships it: it is not a token-by-token decode loop, so graph capture only "
                "costs start-up time and memory from its 0.25 share",
            )

    def streaming(self) -> None:
        consequence = "audio is not streamed: time to first packet equals the whole clip"
        if not self.profile.async_chunk:
            self._add("async_chunk", f"should be true; {consequence}", Severity.WARNING)
        if not self.profile.codec_streaming:
            self._add(
                f"{_connector_extra_path(self.profile.raw)}.codec_streaming",
                f"should be true; {consequence}",
                Severity.WARNING,
            )

    def role(self, role: PoolName) -> None:
        low_latency = is_low_latency(self.profile)
        if role is PoolName.LOW_LATENCY and not low_latency:
            self._add(
                f"{self.t}.enforce_eager",
                "the low_latency pool needs a low-latency profile (enforce_eager: false with "
                "FULL_DECODE_ONLY decode graphs); this one is eager",
            )
        elif role is PoolName.HIGH_THROUGHPUT and low_latency:
            if self.talker.max_num_seqs > LOW_LATENCY_MAX_SEQS:
                # Upstream's newer high-throughput layout decodes through graphs at a large
                # batch: a valid choice for this pool, just not the one measured here.
                self._add(
                    f"{self.t}.enforce_eager",
                    f"a decode-graph profile running up to {self.talker.max_num_seqs} requests: accepted for the "
                    "high_throughput pool (newer upstream layout); the routing thresholds were measured on the "
                    "eager high-throughput profile, so re-tune them (higgs-gateway bench tune)",
                    Severity.WARNING,
                )
                return
            self._add(
                f"{self.t}.enforce_eager",
                "the high_throughput pool needs a high-throughput profile (enforce_eager: true); "
                "this one decodes through vLLM's CUDA graphs",
            )

    def unknown_shape(self) -> None:
        if shape(self.profile) in SHIPPED_SHAPES:
            return
        self._add(
            "<profile>",
            "valid, but not one of the vllm-omni 0.30.0 profiles (a newer upstream or a custom one): "
            f"{describe(self.profile)}. It starts and the emulator models it from these keys; latency "
            "figures and routing thresholds measured on the shipped profiles may not hold",
            Severity.WARNING,
        )


def _stage_path(raw: dict[str, Any], stage_id: int) -> str:
    for index, stage in enumerate(raw.get("stages") or []):
        if isinstance(stage, dict) and stage.get("stage_id") == stage_id:
            return f"stages[{index}]"
    return f"stages[stage_id={stage_id}]"


def _connector_extra_path(raw: dict[str, Any]) -> str:
    # Same connector the parser reads codec settings from: the first one with an `extra`.
    connectors = raw.get("connectors")
    if isinstance(connectors, dict):
        for name, connector in connectors.items():
            if isinstance(connector, dict) and connector.get("extra") is not None:
                return f"connectors.{name}.extra"
    return "connectors.*.extra"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="higgs-gateway profiles", description="Deploy-profile tools.", formatter_class=HelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser(
        "check",
        help="validate deploy profiles (default: the three committed ones)",
        description="Validate vllm-omni deploy profiles for Higgs-Audio. Exit status 1 when any "
        "error is found; warnings alone exit 0.",
        formatter_class=HelpFormatter,
    )
    check.add_argument("files", nargs="*", metavar="FILE", help="deploy YAML paths or bare names in profiles/")
    check.add_argument(
        "--role",
        choices=[pool.value for pool in PoolName],
        help="also require the profile kind this pool needs",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    files = args.files or list(COMMITTED_PROFILES)  # bare names: repo or installed profiles/
    role = PoolName(args.role) if args.role else None
    failed = False
    for file in files:
        findings = check_file(file, role)
        failed |= has_errors(findings)
        if not findings:
            print(f"{file}: ok")
        for finding in findings:
            print(finding)
    return 1 if failed else 0
