"""What one supervised worker runs: its command line, environment, address and log file."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.config import LaunchConfig
from gateway.types import PoolName

PLACEHOLDERS = frozenset({"model", "profile", "host", "port", "served_model_name", "worker_id", "gpu"})
_PLACEHOLDER = re.compile(r"\{(\w+)\}")

# Set for every worker, as the reference launch does: DeepGEMM is an FP8 kernel path this
# BF16 model has no use for, and vLLM would otherwise try to select (and JIT) it.
SPEAKER_DIR_ENV = "SPEAKER_SAMPLES_DIR"  # where a vllm-omni worker keeps uploaded voices
LOAD_TRACKING_FLAG = "--enable-server-load-tracking"
WORKER_ENV_DEFAULTS: dict[str, str] = {
    "VLLM_USE_DEEP_GEMM": "0",
    "VLLM_MOE_USE_DEEP_GEMM": "0",
    # Through a pipe Python block-buffers stdout: a crash would lose the last log lines.
    "PYTHONUNBUFFERED": "1",
}


# What a worker inherits from the gateway's environment: what a Python/CUDA/vLLM process
# needs to run, find its GPUs, caches and CA certificates, and reach the Hub. Nothing else:
# the gateway's own settings (HIGGS_GATEWAY_*: the admin token, the Redis password) and any
# other secret of its environment stay out of processes that run --trust-remote-code and
# parse untrusted audio. Anything more goes in launch.env, by name.
INHERITED_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
    "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "OMP_NUM_THREADS",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
})  # fmt: skip
INHERITED_ENV_PREFIXES = (
    "LC_", "XDG_", "PYTHON", "CUDA_", "NVIDIA_", "NCCL_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "VLLM_",
    "TORCH", "TRITON_", "SPEAKER_",
)
NEVER_INHERITED_PREFIX = "HIGGS_GATEWAY_"


def inherited_env(base: Mapping[str, str]) -> dict[str, str]:
    """The part of the gateway's environment a worker may see (INHERITED_ENV_*)."""
    return {
        name: value
        for name, value in base.items()
        if not name.startswith(NEVER_INHERITED_PREFIX)
        and (name in INHERITED_ENV_NAMES or name.startswith(INHERITED_ENV_PREFIXES))
    }


@dataclass(frozen=True)
class WorkerSpec:
    """Everything needed to (re)start one worker; fixed for the worker's lifetime."""

    worker_id: str
    pool: PoolName
    gpu: str
    host: str
    port: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    log_path: Path

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def worker_id(pool: PoolName, index: int) -> str:
    return f"{pool.value}-{index}"


def check_template(command: Sequence[str]) -> None:
    """Refuse unknown placeholders at start-up, not as a worker that cannot parse its flags."""
    if not command:
        raise ValueError("launch.command is empty")
    for arg in command:
        for name in _PLACEHOLDER.findall(arg):
            if name not in PLACEHOLDERS:
                raise ValueError(f"launch.command: unknown placeholder {{{name}}} in {arg!r}; known: {sorted(PLACEHOLDERS)}")


def render_command(
    command: Sequence[str], values: Mapping[str, str], stage_overrides: Mapping[str, object] | None = None
) -> list[str]:
    """Fill ``{name}`` placeholders; other braces (e.g. inline JSON) are left alone."""
    check_template(command)
    argv = [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in command]
    if stage_overrides:
        argv += ["--stage-overrides", json.dumps(stage_overrides, separators=(",", ":"))]
    return argv


def worker_env(
    launch: LaunchConfig, gpu: str, base: Mapping[str, str] | None = None, speaker_dir: Path | None = None
) -> dict[str, str]:
    """The allowed part of the inherited env, the worker defaults, launch.env; the GPU pin
    and speaker dir always win."""
    env = inherited_env(os.environ if base is None else base)
    env.update(WORKER_ENV_DEFAULTS)
    env.update(launch.env)
    # Both stages say devices: "0", an index into CUDA_VISIBLE_DEVICES: this is the GPU choice.
    env["CUDA_VISIBLE_DEVICES"] = gpu
    if speaker_dir is not None:
        env[SPEAKER_DIR_ENV] = str(speaker_dir)
    return env


def worker_speaker_dir(speakers_root: Path, worker_id: str) -> Path:
    """One directory per worker: vllm-omni's default (~/.cache/vllm-omni/speakers) is shared
    by every worker on a host, where one worker's delete removes another's files, and a
    worker restores whatever it finds there at start."""
    return speakers_root / worker_id


def with_load_tracking(argv: list[str]) -> list[str]:
    """The worker's /load only counts requests with --enable-server-load-tracking (else it
    answers 0 forever): add the flag to a vllm-omni command line (``--omni``) that forgot
    it. Any other command (a wrapper script, a test stub) is left as written."""
    if LOAD_TRACKING_FLAG in argv or "--omni" not in argv:
        return argv
    return [*argv, LOAD_TRACKING_FLAG]


def free_port(host: str) -> int:
    """A port free right now. Kept for the worker's lifetime so its URL never changes."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def build_specs(
    pool: PoolName,
    launch: LaunchConfig,
    profile_path: Path,
    served_model_name: str,
    log_dir: Path,
    base_env: Mapping[str, str] | None = None,
    speakers_root: Path | None = None,
) -> list[WorkerSpec]:
    """One spec per GPU entry: worker i on port_start + i (or a free port when 0)."""
    check_template(launch.command)
    if launch.port_start and launch.port_start + len(launch.gpus) - 1 > 65535:
        raise ValueError(f"launch.port_start {launch.port_start} + {len(launch.gpus)} workers exceeds 65535")
    return [
        build_spec(
            pool, launch, profile_path, served_model_name, log_dir, index, gpu,
            launch.port_start + index if launch.port_start else free_port(launch.host),
            base_env, speakers_root,
        )  # fmt: skip
        for index, gpu in enumerate(launch.gpus)
    ]


def build_spec(
    pool: PoolName,
    launch: LaunchConfig,
    profile_path: Path,
    served_model_name: str,
    log_dir: Path,
    index: int,
    gpu: str,
    port: int,
    base_env: Mapping[str, str] | None = None,
    speakers_root: Path | None = None,
) -> WorkerSpec:
    """Worker ``<pool>-<index>`` on ``gpu`` at ``port``, as this pool's launch runs it."""
    wid = worker_id(pool, index)
    values = {
        "model": launch.model,
        "profile": str(profile_path),
        "host": launch.host,
        "port": str(port),
        "served_model_name": launch.served_model_name or served_model_name,
        "worker_id": wid,
        "gpu": gpu,
    }
    return WorkerSpec(
        worker_id=wid,
        pool=pool,
        gpu=gpu,
        host=launch.host,
        port=port,
        argv=tuple(with_load_tracking(render_command(launch.command, values, launch.stage_overrides))),
        env=worker_env(launch, gpu, base_env, worker_speaker_dir(speakers_root, wid) if speakers_root is not None else None),
        log_path=log_dir / f"{wid}.log",
    )
