"""The gateway with its desired worker mix read from a file the benchmark writes.

``python -m gateway.bench.held_mix --config FILE --mix MIX.json`` serves exactly as
``higgs-gateway serve --config FILE``, except that the supervisor's profile changes follow
the mix in MIX.json (``{"low_latency": 1, "high_throughput": 1}``) instead of the planner's:
``bench profile-changes --mix load`` holds the mix its load calls for, so what it measures
is the change itself, not the planner's judgement. A missing or unreadable file: no judgement.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from gateway import serve
from gateway.config import ConfigError, load_config


class FileMix:
    """``DesiredMix`` from a JSON file, read at each look (every ``profile_changes.interval_s``)."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def mix_for(self, gpus: int) -> Mapping[str, int] | None:
        try:
            mix = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(mix, dict) or not all(isinstance(n, int) for n in mix.values()):
            return None
        return mix


def write_mix(path: Path, mix: Mapping[str, int]) -> None:
    """Replace the file in one step, so the gateway never reads half of it."""
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(dict(mix)))
    scratch.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.bench.held_mix", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mix", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"higgs-gateway: {exc}", file=sys.stderr)
        return 2
    return serve.run(config, FileMix(args.mix))


if __name__ == "__main__":
    sys.exit(main())
