"""``higgs-gateway demo``: the gateway with emulated low-latency and high-throughput pools.

The emulated workers are launched and supervised exactly like real vllm-omni workers
(same command-line flags, readiness, warm-up and restart), only the binary differs, so a
demo worker that dies comes back the way a real one would.
"""

from __future__ import annotations

import argparse
import importlib.util
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

from gateway.config import ConfigError, load_config
from gateway.help_format import HelpFormatter
from gateway.serve import run

DEMO_MODEL = "bosonai/higgs-audio-v3-tts-4b"


def emulator_command(time_scale: float) -> list[str]:
    """The emulator's command template: vllm-omni serve's flags plus a time scale."""
    return [
        sys.executable, "-m", "gateway", "emulate", "{model}", "--omni", "--trust-remote-code",
        "--deploy-config", "{profile}", "--host", "{host}", "--port", "{port}",
        "--served-model-name", "{served_model_name}", "--log-stats", "--enable-server-load-tracking",
        "--time-scale", str(time_scale),
    ]  # fmt: skip


def speech_note() -> str:
    """What the demo says when the emulated workers cannot speak the text (the `emulator` extra
    is missing): looked up, not imported, so the gateway never loads the speech library."""
    if importlib.util.find_spec("espeakng_loader") is not None:
        return ""
    return ("\n  The emulated workers will send a synthetic signal, not speech: install the emulator extra\n"
            "  (pip install 'higgs-gateway[emulator]', as scripts/demo.sh does) to hear the text.\n")  # fmt: skip


def ready_requires(args: argparse.Namespace) -> str:
    """Every pool, unless the demo leaves one empty on purpose (``--...-workers 0``)."""
    return "every_pool" if args.low_latency_workers and args.high_throughput_workers else "any_pool"


def demo_config(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="higgs-demo-"))

    def pool(profile: str, workers: int) -> dict[str, Any]:
        if workers == 0:
            return {"profile": profile}
        return {
            "profile": profile,
            "launch": {
                "gpus": [str(i) for i in range(workers)],
                "host": "127.0.0.1",
                "port_start": 0,
                "command": emulator_command(args.time_scale),
                "start_timeout_s": 120,
                "stop_timeout_s": 10,
            },
        }

    config: dict[str, Any] = {
        # Ready means warm on both sides: with the default (any pool), /ready would answer 200
        # while the high-throughput worker still warms and every request goes to low-latency.
        "server": {"host": args.host, "port": args.port, "playground": True, "ready_requires": ready_requires(args)},
        "logging": {"format": args.log_format},
        "data_dir": str(data_dir),
        # Compare pins each side to its pool: on an idle demo routing by class sends both to
        # low-latency (rightly), and the page would compare a pool with itself.
        "routing": {"allow_pool_pin": True},
        "pools": {
            "low_latency": pool("higgs_multimodal_qwen3_low_latency.yaml", args.low_latency_workers),
            "high_throughput": pool("higgs_multimodal_qwen3_high_throughput.yaml", args.high_throughput_workers),
        },
    }
    if args.admin_token:
        config["auth"] = {"admin_token": args.admin_token}
    if args.allow_anonymous:
        config.setdefault("auth", {})["allow_anonymous"] = True
    return config


def playground_link(base: str, admin_token: str | None) -> str:
    """The playground's address; with a token after '#admin=' the page fills in its fleet panel."""
    return f"{base}/playground#admin={admin_token}" if admin_token else f"{base}/playground"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="higgs-gateway demo",
        description="Run the gateway with emulated low-latency and high-throughput worker pools (no GPU needed).",
        formatter_class=HelpFormatter,
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="address the gateway listens on (0.0.0.0 needs --allow-anonymous)")
    add("--port", metavar="PORT", type=int, default=8000, help="the gateway's port (the emulated workers pick free ones)")
    add("--low-latency-workers", metavar="N", type=int, default=1, help="emulated low-latency workers (0 = none)")
    add("--high-throughput-workers", metavar="N", type=int, default=1, help="emulated high-throughput workers (0 = none)")
    add("--time-scale", metavar="F", type=float, default=1.0, help="emulated GPU time x F (0.1 = ten times faster than an H200)")
    add(
        "--allow-anonymous", action="store_true",
        help="serve /v1 without API keys on a non-loopback --host (auth.allow_anonymous; refused otherwise)",
    )  # fmt: skip
    add(
        "--admin-token", metavar="TOKEN",
        help="bearer token for /admin routes and the playground's fleet panel (default: a fresh one, printed at start)",
    )  # fmt: skip
    add("--data-dir", metavar="DIR", help="where voices and thresholds are kept (default: a fresh temporary folder)")
    add("--config", metavar="FILE", help="optional gateway config merged under the demo's settings")
    parser.add_argument(
        "--log-format", choices=["auto", "text", "json"], default="auto",
        help="auto: short human lines on a terminal, JSON otherwise",
    )  # fmt: skip
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    generated_token = not args.admin_token
    if generated_token:
        args.admin_token = secrets.token_urlsafe(24)
    if args.low_latency_workers < 0 or args.high_throughput_workers < 0 or args.time_scale <= 0:
        print("higgs-gateway demo: worker counts must be >= 0 and --time-scale > 0", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config, demo_config(args))
    except ConfigError as exc:
        print(f"higgs-gateway demo: {exc}", file=sys.stderr)
        return 2
    base = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{args.port}"
    # The link carries the token after '#': the page fills in the fleet panel's token from it,
    # and a fragment is never sent to the server, so it reaches no log.
    link = playground_link(base, args.admin_token if generated_token else None)
    token_line = f"  admin token (fleet panel, /admin): {args.admin_token}\n" if generated_token else ""
    print(
        "\nHiggs-Audio gateway demo starting (emulated workers, no GPU). The workers start and warm up\n"
        "first; the log says \"every pool has a routable worker\" and /ready answers 200 once they have.\n"
        f"Then open\n\n  {link}\n\n{token_line}or try:\n\n"
        f"  curl -sS {base}/v1/audio/speech -H 'Content-Type: application/json' \\\n"
        "    -d '{\"model\": \"tts-1\", \"voice\": \"alloy\", \"input\": \"Hello from the Higgs gateway!\", "
        "\"response_format\": \"wav\"}' -o hello.wav\n\n"
        f"  readiness: curl {base}/ready    metrics: curl {base}/metrics\n{speech_note()}",
        file=sys.stderr,
        flush=True,
    )
    return run(config)
