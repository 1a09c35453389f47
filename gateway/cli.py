"""``higgs-gateway``: one console script, one sub-command per job.

Each sub-command's parser and body live with the part they drive; this module only
dispatches, so ``--help`` stays cheap and a command never imports what it does not use.
Usage errors (no command, an unknown one) go to stderr with exit status 2, as argparse does.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# ``higgs-gateway bench``'s tools, named here so ``--help`` lists them without importing the
# benchmark (tests/unit/test_cli.py holds this list to the bench parser's).
BENCH_TOOLS = (
    "sweep", "trace", "plot", "compare", "overhead", "first-audio", "sessions", "integrations", "profile-changes",
    "upload-stall", "soak", "decision", "encoder-cost", "quality-cost", "quality-soak", "floor", "replica-kill", "agreement", "held-mix",
)  # fmt: skip

# sub-command -> (module, one-line help); each module exposes ``main(argv) -> int``.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("gateway.serve", "run the gateway from a config file"),
    "demo": ("gateway.demo", "run the gateway with emulated low-latency and high-throughput pools"),
    "emulate": ("gateway.emulator.cli", "run one emulated vllm-omni Higgs-Audio worker (vllm-omni serve's flags)"),
    "bench": ("gateway.bench.cli", "load tests and benchmarks, `bench TOOL`: " + ", ".join(BENCH_TOOLS)),
    "emulator": ("gateway.emulator.calibrate", "emulator calibrate: the timing model against the published figures"),
    "simulate": ("gateway.simulator.cli", "replay sweeps and traces on a simulated fleet in seconds (virtual time)"),
    "tune": ("gateway.bench.tune", "measure both pools and recommend routing thresholds"),
    "acceptance": ("gateway.acceptance.cli", "revalidate a GPU fleet: both profiles, FlashInfer vs XQA, curves, audio quality"),
    "profiles": ("gateway.supervisor.profile_check", "profiles check [FILE...]: validate deploy profiles"),
    "state": ("gateway.state.migrate", "state migrate: copy routing overrides, drains and voices between a data directory and Redis"),
    "keys": ("gateway.security.keys", "keys new|hash: make an API key and the sha256 digest to configure"),
}


def build_parser() -> argparse.ArgumentParser:
    from gateway import __version__

    parser = argparse.ArgumentParser(
        prog="higgs-gateway",
        description="OpenAI-compatible speech gateway for low-latency and high-throughput vllm-omni pools.",
        epilog="Run `higgs-gateway COMMAND --help` for a command's options.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name, (_, help_) in COMMANDS.items():
        # Every argument after the command goes to the command's own parser untouched
        # (no option is recognised here, not even -h).
        commands.add_parser(name, help=help_, add_help=False, prefix_chars="\0")
    return parser


def main(argv: list[str] | None = None) -> int:
    args, rest = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    return int(module.main(rest) or 0)
