"""``higgs-gateway demo``: the playground is on and logs are readable on a terminal."""

from __future__ import annotations

from pathlib import Path

from gateway.config import load_config
from gateway.demo import build_parser, demo_config


def test_the_demo_serves_the_playground_and_picks_log_lines_by_terminal(tmp_path: Path) -> None:
    config = load_config(None, demo_config(build_parser().parse_args(["--data-dir", str(tmp_path)])))
    assert config.server.playground is True
    assert config.logging.format == "auto"


def test_log_format_can_be_chosen(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--data-dir", str(tmp_path), "--log-format", "json"])
    assert load_config(None, demo_config(args)).logging.format == "json"


def test_the_demo_is_ready_only_once_every_pool_is_warm(tmp_path: Path) -> None:
    both = load_config(None, demo_config(build_parser().parse_args(["--data-dir", str(tmp_path)])))
    assert both.server.ready_requires == "every_pool"
    # A pool left empty on purpose would otherwise never let the demo be ready.
    one = build_parser().parse_args(["--data-dir", str(tmp_path), "--high-throughput-workers", "0"])
    assert load_config(None, demo_config(one)).server.ready_requires == "any_pool"
