"""``higgs-gateway emulate``: one emulated worker, launched like ``vllm-omni serve``.

    higgs-gateway emulate bosonai/higgs-audio-v3-tts-4b --omni --trust-remote-code \\
        --deploy-config higgs_multimodal_qwen3_low_latency.yaml --host 127.0.0.1 --port 8091 \\
        --log-stats --enable-server-load-tracking [--time-scale 0.1]

The worker's own flags come first (same names, same parsing: unknown flags and the removed
``--stage-configs-path`` are errors, unambiguous prefixes are accepted); the emulator's own flags follow.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.worker.profile import DeployProfile, ProfileError, load_deploy_profile
from gateway.emulator.faults import Faults, StreamCut
from gateway.emulator.voices import DEFAULT_MAX_UPLOADED
from gateway.help_format import HelpFormatter

if TYPE_CHECKING:
    from gateway.emulator.app import EmulatorSettings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="higgs-gateway emulate",
        description="Run one emulated vllm-omni Higgs-Audio V3 worker (same API and flags, modelled GPU timing).",
        allow_abbrev=True,  # vLLM's FlexibleArgumentParser keeps argparse's prefix matching
        formatter_class=HelpFormatter,
    )
    worker = parser.add_argument_group("vllm-omni serve flags")
    worker.add_argument("model", help="model id, e.g. bosonai/higgs-audio-v3-tts-4b")
    worker.add_argument("--omni", action="store_true", help="required: serve the multi-stage omni pipeline")
    worker.add_argument("--trust-remote-code", action="store_true")
    worker.add_argument("--deploy-config", required=True, help="deploy profile YAML: a path or a bare name in profiles/")
    worker.add_argument("--stage-overrides", default=None, help='JSON per stage id, e.g. \'{"0": {"max_num_seqs": 8}}\'')
    worker.add_argument("--host", default="0.0.0.0")
    worker.add_argument("--port", type=int, default=8000)
    worker.add_argument("--served-model-name", nargs="+", default=None)
    worker.add_argument("--log-stats", action="store_true")
    worker.add_argument("--disable-log-stats", action="store_true")
    worker.add_argument("--enable-server-load-tracking", action="store_true")
    worker.add_argument("--stage-init-timeout", type=int, default=300, help="accepted for compatibility")
    worker.add_argument("--init-timeout", type=int, default=600, help="accepted for compatibility")

    emulator = parser.add_argument_group("emulator-only flags")
    emulator.add_argument("--time-scale", type=float, default=1.0, help="multiply all modelled GPU time (0.1 = 10x faster than an H200)")
    emulator.add_argument("--startup-delay", type=float, default=0.0, help="seconds before the HTTP listener opens (weights loading)")
    emulator.add_argument(
        "--model-startup", action="store_true",
        help="also wait the profile's modelled start-up (weights, torch.compile, graph capture; minutes on a real GPU) x --time-scale",
    )  # fmt: skip
    emulator.add_argument("--voices-dir", type=Path, default=None, help="where uploaded voices live (default: $SPEAKER_SAMPLES_DIR as on a real worker, else a temporary directory)")
    emulator.add_argument("--warm", action="store_true", help="start with every lazy graph captured (as after a full warm-up)")
    emulator.add_argument(
        "--synthetic-audio", action="store_true",
        help="send the synthetic voiced-words signal instead of speaking the text with eSpeak NG (least CPU)",
    )  # fmt: skip
    emulator.add_argument("--seed", type=int, default=None, help="default sampling seed (default: the profile's, 42)")
    emulator.add_argument("--fail-next", type=int, default=0, metavar="N", help="fault: the next N speech requests answer 500")
    emulator.add_argument("--cut-after-chunks", type=int, default=None, metavar="K", help="fault: drop streams after K chunks")
    emulator.add_argument("--error-after-chunks", type=int, default=None, metavar="K", help="fault: fail generation after K chunks")
    emulator.add_argument("--hang-seconds", type=float, default=None, metavar="S", help="fault: send nothing for S s first")
    emulator.add_argument("--unhealthy", action="store_true", help="fault: /health answers 503")
    emulator.add_argument("--fault-noisy-from", type=_concurrency, default=None, metavar="N", help="fault: audio drowned in noise while N or more requests run")
    emulator.add_argument("--fault-silent-from", type=_concurrency, default=None, metavar="N", help="fault: silent audio while N or more requests run")
    emulator.add_argument("--fault-clipped-from", type=_concurrency, default=None, metavar="N", help="fault: audio clipped at full scale while N or more requests run")
    emulator.add_argument(
        "--stream-config-timeout", type=float, default=10.0, metavar="S",
        help="/v1/audio/speech/stream: seconds to wait for session.config (fixed on a real worker; shorten for tests)",
    )  # fmt: skip
    emulator.add_argument(
        "--stream-idle-timeout", type=float, default=30.0, metavar="S",
        help="/v1/audio/speech/stream: seconds between messages (fixed on a real worker; shorten for tests)",
    )  # fmt: skip
    emulator.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.omni:
        parser.error("--omni is required: without it vllm-omni runs plain vLLM, which cannot serve Higgs-Audio V3")
    if args.time_scale <= 0:
        parser.error("--time-scale must be > 0")
    for flag, seconds in (("--stream-config-timeout", args.stream_config_timeout), ("--stream-idle-timeout", args.stream_idle_timeout)):
        if seconds <= 0:
            parser.error(f"{flag} must be > 0")
    for flag, value in (("--fail-next", args.fail_next), ("--cut-after-chunks", args.cut_after_chunks), ("--error-after-chunks", args.error_after_chunks)):
        if value is not None and value < 0:
            parser.error(f"{flag} must be >= 0")
    try:
        profile = load_deploy_profile(args.deploy_config, args.stage_overrides)
    except (ProfileError, FileNotFoundError) as exc:
        print(f"higgs-gateway emulate: {exc}", file=sys.stderr)
        return 2

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("uvicorn.error").addFilter(_DropInjectedCuts())

    # Imported late so `--help` and argument errors stay fast.
    import uvicorn

    from gateway.emulator.app import create_app

    with tempfile.TemporaryDirectory(prefix="higgs-emulator-voices-") as scratch:
        settings = emulator_settings(args, profile, args.voices_dir or speaker_dir_from_env(os.environ) or Path(scratch))
        app = create_app(settings)
        delay = startup_delay(args, profile)
        if delay > 0:
            # A real worker answers nothing (connection refused) until its stages are up.
            time.sleep(delay)
        config = uvicorn.Config(
            app, host=args.host, port=args.port, loop="uvloop", http="httptools",
            log_level=args.log_level, access_log=False, lifespan="on",
            # A stuck request (hang fault) must not hold up a restart for long.
            timeout_graceful_shutdown=2,
        )  # fmt: skip
        server = uvicorn.Server(config)
        # terminate_if_errored (vllm launcher.py 199-209): engine death stops the server.
        app.state.engine_life.stop_serving = lambda: setattr(server, "should_exit", True)
        logging.getLogger("gateway.emulator").warning(
            "emulated worker %s on http://%s:%d (profile %s, time scale %g)",
            settings.names[0], args.host, args.port, profile.source, args.time_scale,
        )  # fmt: skip
        server.run()
    return 0


def startup_delay(args: argparse.Namespace, profile: DeployProfile) -> float:
    """Wall seconds before listening: ``--startup-delay``, plus with ``--model-startup`` the
    profile's modelled start-up scaled like every other modelled time."""
    delay = max(0.0, args.startup_delay)
    if args.model_startup:
        from gateway.worker.timing import StepModel

        delay += StepModel(profile).startup_seconds() * args.time_scale
    return delay


def emulator_settings(args: argparse.Namespace, profile: DeployProfile, voices_dir: Path) -> EmulatorSettings:
    """What the parsed command line asks for."""
    from gateway.emulator.app import EmulatorSettings
    from gateway.emulator.speech_stream import StreamTimeouts
    from gateway.emulator.spoken import SpeechAudio

    return EmulatorSettings(
        model=args.model,
        profile=profile,
        voices_dir=voices_dir,
        max_uploaded_voices=max_uploaded_from_env(os.environ),
        served_model_names=tuple(args.served_model_name or ()),
        time_scale=args.time_scale,
        seed=args.seed,
        load_tracking=args.enable_server_load_tracking,
        # vllm-omni api_server.py: log_stats = not --disable-log-stats (--log-stats only
        # matters to headless stage processes).
        log_stats=not args.disable_log_stats,
        warm=args.warm,
        audio=functools.partial(SpeechAudio, speak=not args.synthetic_audio),
        faults=Faults(
            fail_next=args.fail_next,
            cut_after_chunks=args.cut_after_chunks,
            error_after_chunks=args.error_after_chunks,
            hang_seconds=args.hang_seconds,
            unhealthy=args.unhealthy,
            noisy_from=args.fault_noisy_from,
            silent_from=args.fault_silent_from,
            clipped_from=args.fault_clipped_from,
        ),
        stream_timeouts=StreamTimeouts(config=args.stream_config_timeout, idle=args.stream_idle_timeout),
    )


def _concurrency(value: str) -> int:
    """A concurrency for the audio faults: 1 or more."""
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {number})")
    return number


def speaker_dir_from_env(env: Mapping[str, str]) -> Path | None:
    """``$SPEAKER_SAMPLES_DIR``, where a real worker keeps (and restores) uploaded voices."""
    value = env.get("SPEAKER_SAMPLES_DIR")
    return Path(value).expanduser() if value else None


def max_uploaded_from_env(env: Mapping[str, str]) -> int:
    """``$SPEAKER_MAX_UPLOADED`` as the real worker reads it: default 1000, also when invalid."""
    try:
        return int(env.get("SPEAKER_MAX_UPLOADED") or DEFAULT_MAX_UPLOADED)
    except ValueError:
        return DEFAULT_MAX_UPLOADED


class _DropInjectedCuts(logging.Filter):
    """An injected connection cut is the point of the fault, not an application error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, StreamCut):
                return False
            if isinstance(exc, BaseExceptionGroup):
                if any(isinstance(inner, StreamCut) for inner in exc.exceptions):
                    return False
            exc = exc.__cause__ or exc.__context__
        return True
