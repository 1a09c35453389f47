"""``higgs-gateway``: one console script, one sub-command per job.

Each sub-command's parser and body live with the part they drive; this module only
dispatches, so ``--help`` stays cheap and a command never imports what it does not use.
"""

from __future__ import annotations

import importlib
import sys

# sub-command -> (module, one-line help); each module exposes ``main(argv) -> int``.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("gateway.serve", "run the gateway from a config file"),
    "demo": ("gateway.demo", "run the gateway with emulated low-latency and high-throughput pools"),
    "emulate": ("gateway.emulator.cli", "run one emulated vllm-omni Higgs-Audio worker (vllm-omni serve's flags)"),
    "bench": ("gateway.bench.cli", "load-test an OpenAI-compatible speech endpoint"),
    "simulate": ("gateway.simulator.cli", "replay sweeps and traces on a simulated fleet in seconds (virtual time)"),
    "tune": ("gateway.bench.tune", "measure both pools and recommend routing thresholds"),
    "profiles": ("gateway.supervisor.profile_check", "profiles check [FILE...]: validate deploy profiles"),
    "state": ("gateway.state.migrate", "state migrate: copy routing overrides, drains and voices between a data directory and Redis"),
    "keys": ("gateway.security.keys", "keys new|hash: make an API key and the sha256 digest to configure"),
}


def _usage() -> str:
    lines = ["usage: higgs-gateway COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `higgs-gateway COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help"}:
        print(_usage())
        return 0 if args else 2
    if args[0] in {"-V", "--version"}:
        from gateway import __version__

        print(__version__)
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"higgs-gateway: unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(command[0])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
